#!/usr/bin/env bash
# Build llama.cpp's llama-server, llama-bench and llama-quantize once, from the llama.cpp tree the
# PyPI source distribution of llama-cpp-python vendors (the only way to get llama.cpp here: no
# downloads outside the package registries). The binaries land in a cache under $HOME/.cache and
# are reused; prints their directory on stdout.
# Usage: scripts/peer_build.sh [VERSION]   (default 0.3.36, the version checked in peers.md)
set -euo pipefail
version=${1:-0.3.36}
cache=${MOEFLEET_PEER_CACHE:-$HOME/.cache/moefleet/peer}
src=$cache/llama_cpp_python-$version
bin=$src/vendor/llama.cpp/build/bin
targets="llama-server llama-bench llama-quantize"
# ggml's AMX kernels stop with SIGILL (`tilezero`, in tinygemm_kernel_amx) on this workplace's
# Xeon hosts that list amx_tile (family 6, model 167; seen 2026-12-03 in llama-bench and
# llama-server), so where the CPU lists AMX the build keeps -march=native but leaves AMX out
# (GCC honours an explicit -mno-* whatever -march says): llama.cpp then runs its AVX-512 kernels.
flags=""
if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"; fi
stamp=$bin/moefleet-build-flags
if [ -x "$bin/llama-server" ] && [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-quantize" ] \
   && [ "$(cat "$stamp" 2>/dev/null)" = "native $flags" ]; then
  echo "$bin"
  exit 0
fi
command -v cmake >/dev/null || { echo "peer: cmake is missing (apt-get install cmake)" >&2; exit 1; }
mkdir -p "$cache"
tarball=$cache/llama_cpp_python-$version.tar.gz
if [ ! -f "$tarball" ]; then
  echo "peer: fetching the llama-cpp-python $version source distribution from PyPI" >&2
  pip download --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$cache" >&2
fi
if [ ! -d "$src" ]; then
  tar -xzf "$tarball" -C "$cache"
fi
tree=$src/vendor/llama.cpp
[ -d "$tree" ] || { echo "peer: $tarball has no vendor/llama.cpp" >&2; exit 1; }
# the vendored tree's .git points at a parent repository the sdist does not have
rm -rf "$tree/.git"
echo "peer: building $targets (about six minutes on two cores)" >&2
[ -n "$flags" ] && echo "peer: this CPU lists AMX; building without it ($flags)" >&2
cmake -S "$tree" -B "$tree/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >&2
# shellcheck disable=SC2086
cmake --build "$tree/build" -j "$(nproc)" --target $targets >&2
echo "native $flags" >"$stamp"
echo "$bin"
