#!/usr/bin/env bash
# The engine beside llama.cpp on the same shapes (`make peer`): builds llama.cpp once from the
# PyPI source distribution (scripts/peer_build.sh), writes a random-weight qwen3moe GGUF with the
# preset's shapes and this project's tokenizer (scripts/peer_gguf.py), then in one run measures
# llama-bench and `moefleet bench` at the same thread counts and test sizes, one after the other,
# with the load average before and after; then the same harness sweep (paper plan, LEVELS) against
# llama-server on that GGUF and against our ROLES-role fleet, one after the other; and writes
# OUT/PEER.md (moefleet-harness peer).
# Usage: scripts/peer.sh OUT_DIR BIN_DIR [quick]
set -euo pipefail
out=${1:?out dir}; bin=${2:?bin dir}; mode=${3:-full}
preset=${PRESET:-inkling-mini}; seed=${SEED:-7}
threads=${THREADS:-1,2}; prompts=${PROMPTS:-64,512}; gen=${GEN:-128}; reps=${REPS:-5}
levels=${LEVELS:-1,8,88,176}; plan=${PLAN:-paper}; roles=${ROLES:-11}
if [ "$mode" = quick ]; then prompts=64; gen=32; reps=2; levels=1,4; plan=quick; fi
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

# Served: the same sweep against llama-server (one slot per stream of the largest level, each with
# room for the longest prompt and the output cap) and against our fleet.
top=$(tr ',' '\n' <<<"$levels" | sort -n | tail -n 1)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# LLAMA_ARGS: extra llama-server arguments (default --kv-unified: with one KV stream per slot, a
# batch's attention spans every stream between its lowest and highest slot id, which slows the
# passes after the largest level; results/llama-server-slots-20261203)
read -r -a extra <<<"${LLAMA_ARGS---kv-unified}"
ls=(llama-server -m "$gguf" --host 127.0.0.1 --port "$port" -t 2 -np "$top" -c $((top * 384)) --alias "$preset" "${extra[@]}")
sw=(moefleet-harness sweep --plan "$plan" --levels "$levels")
LLAMA_PID=""
source "$(dirname "$0")/fleet.sh"
stop_all() {
  fleet_stop
  if [ -n "$LLAMA_PID" ]; then kill "$LLAMA_PID" 2>/dev/null || true; wait "$LLAMA_PID" 2>/dev/null || true; fi
}
trap stop_all EXIT
"$llama/llama-server" "${ls[@]:1}" >"$out/llama-server.log" 2>&1 &
LLAMA_PID=$!
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$LLAMA_PID" 2>/dev/null || { echo "peer: llama-server exited; see $out/llama-server.log" >&2; exit 1; }
  sleep 0.5
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "peer: llama-server not ready in 300 s" >&2; exit 1; }
l3=$(load)
echo "peer: sweep against llama-server (load $l3)" >&2
"$bin/moefleet-harness" "${sw[@]:1}" --url "http://127.0.0.1:$port" --out "$out/served-llama"
kill "$LLAMA_PID"; wait "$LLAMA_PID" 2>/dev/null || true; LLAMA_PID=""
fleet_start "$out/fleet.log" "$bin/moefleet" --preset "$preset" --seed "$seed" --roles "$roles"
l4=$(load)
echo "peer: sweep against the $roles-role fleet (load $l4)" >&2
"$bin/moefleet-harness" "${sw[@]:1}" --url "$FLEET_URL" --out "$out/served-moefleet"
fleet_stop
l5=$(load)
trap - EXIT
for run in served-llama served-moefleet; do "$bin/moefleet-harness" analyze "$out/$run" >/dev/null; done
fs="moefleet serve --preset $preset --seed $seed --roles $roles"
flags=$(cat "$llama/moefleet-build-flags" 2>/dev/null || echo "native")
python3 - "$out/peer.json" "$gguf" "$l0" "$l1" "$l2" "$l3" "$l4" "$l5" "${lb[*]}" "${mb[*]}" "${ls[*]}" "$fs" "${sw[*]}" "$flags" <<'PY'
import json, os, sys
path, gguf, l0, l1, l2, l3, l4, l5, lb, mb, ls, fs, sw, flags = sys.argv[1:]
name = lambda c: c.replace(gguf, os.path.basename(gguf))
json.dump({
    "record": "peer_run",
    "git_commit": os.popen("git rev-parse HEAD 2>/dev/null").read().strip() or None,
    "git_dirty": bool(os.popen("git status --porcelain --untracked-files=no 2>/dev/null").read().strip()),
    "gguf": os.path.basename(gguf),
    "llama_build_flags": flags,
    "gguf_bytes": os.path.getsize(gguf),
    "load_average": {"before_llama": l0.split(), "after_llama": l1.split(), "after_moefleet": l2.split(),
                     "before_llama_server": l3.split(), "before_fleet": l4.split(), "after_fleet": l5.split()},
    "commands": {"llama_bench": name(lb), "moefleet_bench": mb, "llama_server": name(ls),
                 "fleet": fs, "sweep": sw + " --url URL --out DIR"},
}, open(path, "w"), indent=2)
PY
"$bin/moefleet-harness" peer "$out"
