#!/usr/bin/env bash
# Install what a make target needs, or stop with a clear message. Usage: scripts/require.sh rust|python|openvino|peer
set -euo pipefail
die() { echo "moefleet setup: $*" >&2; exit 1; }
# the version the backend's graphs were written against and its records measured with
OPENVINO=openvino==2026.4.1
install_openvino() {
  python3 -c 'import openvino' 2>/dev/null && return 0
  echo "moefleet setup: installing $OPENVINO (Python wheel) for the OpenVINO backend" >&2
  python3 -m pip install --quiet "$OPENVINO" 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages "$OPENVINO"
}
case "${1:-}" in
  rust)
    command -v cargo >/dev/null || die "cargo not found: install the Rust toolchain (https://rustup.rs) and re-run"
    if command -v rustup >/dev/null; then
      for c in rustfmt clippy; do
        rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c" >/dev/null 2>&1 || echo "moefleet setup: could not add rustup component $c (only lint targets need it)" >&2
      done
    fi
    ;;
  python)
    command -v python3 >/dev/null || die "python3 not found: install Python 3 (the float64 oracle needs it)"
    # numpy: the float64 oracle; openai: the official client the API is tested with
    if ! python3 -c 'import numpy, openai' 2>/dev/null; then
      echo "moefleet setup: installing numpy and openai (Python) for the tests" >&2
      python3 -m pip install --quiet numpy openai 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages numpy openai \
        || die "could not pip install numpy openai"
    fi
    # openvino: the OpenVINO backend's runtime (its C library ships in the wheel); without it the
    # backend's tests skip with the reason printed
    install_openvino || echo "moefleet setup: could not pip install $OPENVINO: the OpenVINO backend's tests will be skipped" >&2
    ;;
  openvino)
    # make reproduce: the dense and backends experiments run on OpenVINO too
    install_openvino || die "could not pip install $OPENVINO (the OpenVINO experiments of make reproduce need it)"
    ;;
  peer)
    # make peer: cmake builds llama.cpp; the gguf package writes its model file
    if ! command -v cmake >/dev/null; then
      echo "moefleet setup: installing cmake (Debian) to build llama.cpp" >&2
      # a fresh machine may have no package lists yet: update once and retry
      { apt-get install -y cmake >/dev/null 2>&1 \
          || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y cmake >/dev/null 2>&1; } \
          || { sudo apt-get update -qq >/dev/null 2>&1 && sudo apt-get install -y cmake >/dev/null 2>&1; }; } \
        || die "could not apt-get install cmake"
    fi
    if ! python3 -c 'import gguf, numpy' 2>/dev/null; then
      echo "moefleet setup: installing gguf and numpy (Python) to write the llama.cpp model" >&2
      python3 -m pip install --quiet gguf numpy 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages gguf numpy \
        || die "could not pip install gguf numpy"
    fi
    ;;
  *) die "usage: scripts/require.sh rust|python|openvino|peer" ;;
esac
