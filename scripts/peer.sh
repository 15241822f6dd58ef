#!/usr/bin/env bash
# The engine beside llama.cpp on the same shapes (`make peer`): builds llama.cpp once from the
# PyPI source distribution (scripts/peer_build.sh), writes a random-weight qwen3moe GGUF with the
# preset's shapes and this project's tokenizer (scripts/peer_gguf.py), then in one run measures
# llama-bench and `moefleet bench` at the same thread counts and test sizes, one after the other,
# with the load average before and after, and writes OUT/PEER.md (moefleet-harness peer).
# Usage: scripts/peer.sh OUT_DIR BIN_DIR [quick]
set -euo pipefail
out=${1:?out dir}; bin=${2:?bin dir}; mode=${3:-full}
preset=${PRESET:-inkling-mini}; seed=${SEED:-7}
threads=${THREADS:-1,2}; prompts=${PROMPTS:-64,512}; gen=${GEN:-128}; reps=${REPS:-5}
if [ "$mode" = quick ]; then prompts=64; gen=32; reps=2; fi
mkdir -p "$out"
llama=$("$(dirname "$0")/peer_build.sh")
cache=${MOEFLEET_PEER_CACHE:-$HOME/.cache/moefleet/peer}/models
mkdir -p "$cache"
"$bin/moefleet" inspect --json "$preset" >"$out/preset.json"
gguf=$cache/$preset-seed$seed.gguf
if [ ! -f "$gguf" ]; then
  python3 "$(dirname "$0")/peer_gguf.py" --config "$out/preset.json" \
    --tokenizer workloads/tokenizer.json --seed "$seed" --out "$gguf.tmp"
  mv "$gguf.tmp" "$gguf"
fi
load() { cut -d' ' -f1-3 /proc/loadavg; }
lb=(llama-bench -m "$gguf" -t "$threads" -p "$prompts" -n "$gen" -r "$reps" -o json)
mb=(moefleet bench --preset "$preset" --seed "$seed" --threads "$threads" --prompt "$prompts"
  --gen "$gen" --repetitions "$reps" --json "$out/moefleet-bench.json")
echo "peer: llama-bench (load $(load))" >&2
l0=$(load)
"$llama/llama-bench" "${lb[@]:1}" >"$out/llama-bench.json"
l1=$(load)
echo "peer: moefleet bench (load $l1)" >&2
"$bin/moefleet" "${mb[@]:1}" >/dev/null
l2=$(load)
python3 - "$out/peer.json" "$gguf" "$l0" "$l1" "$l2" "${lb[*]}" "${mb[*]}" <<'PY'
import json, os, sys
path, gguf, l0, l1, l2, lb, mb = sys.argv[1:]
json.dump({
    "record": "peer_run",
    "gguf": os.path.basename(gguf),
    "gguf_bytes": os.path.getsize(gguf),
    "load_average": {"before_llama": l0.split(), "after_llama": l1.split(), "after_moefleet": l2.split()},
    "commands": {"llama_bench": lb.replace(gguf, os.path.basename(gguf)), "moefleet_bench": mb},
}, open(path, "w"), indent=2)
PY
"$bin/moefleet-harness" peer "$out"
