#!/usr/bin/env bash
# The engine beside llama.cpp on one GGUF file (`make peer`): builds llama.cpp once from the PyPI
# source distribution (scripts/peer_build.sh); takes MODEL (a GGUF file) or else writes a
# random-weight qwen3moe GGUF with the preset's shapes and this project's tokenizer
# (scripts/peer_gguf.py); then in one run measures llama-bench and `moefleet bench --model` on
# those identical bytes at the same thread counts and test sizes, one after the other, with the
# load average before and after; then the same harness sweep (paper plan, LEVELS) against
# llama-server on the file and against our fleet serving the file (its own cut into roles unless
# ROLES), one after the other; and writes OUT/PEER.md (moefleet-harness peer). LEVELS=none
# measures the single process alone (no served comparison).
# Usage: [MODEL=FILE.gguf] scripts/peer.sh OUT_DIR BIN_DIR [quick]
set -euo pipefail
out=${1:?out dir}; bin=${2:?bin dir}; mode=${3:-full}
preset=${PRESET:-inkling-mini}; seed=${SEED:-7}
threads=${THREADS:-1,2}; prompts=${PROMPTS:-64,512}; gen=${GEN:-128}; reps=${REPS:-5}
levels=${LEVELS:-1,8,88,176}; plan=${PLAN:-paper}; roles=${ROLES:-}
served=per-level
if [ "$levels" = none ]; then served=none; fi
if [ "$mode" = quick ]; then prompts=64; gen=32; reps=2; levels=1,4; plan=quick; fi
if [ "$served" = none ]; then levels=""; fi
mkdir -p "$out"
llama=$("$(dirname "$0")/peer_build.sh")
if [ -n "${MODEL:-}" ]; then
  gguf=$MODEL
  source_note=${MODEL_SOURCE:-"given as MODEL"}
else
  cache=${MOEFLEET_PEER_CACHE:-$HOME/.cache/moefleet/peer}/models
  mkdir -p "$cache"
  "$bin/moefleet" inspect --json "$preset" >"$out/preset.json"
  gguf=$cache/$preset-seed$seed.gguf
  if [ ! -f "$gguf" ]; then
    python3 "$(dirname "$0")/peer_gguf.py" --config "$out/preset.json" \
      --tokenizer workloads/tokenizer.json --seed "$seed" --out "$gguf.tmp"
    mv "$gguf.tmp" "$gguf"
  fi
  source_note="scripts/peer_gguf.py --config preset.json (inkling preset $preset) --seed $seed"
fi
"$bin/moefleet" inspect --json "$gguf" >"$out/model.json"
alias=$(basename "$gguf" .gguf)
load() { cut -d' ' -f1-3 /proc/loadavg; }
lb=(llama-bench -m "$gguf" -t "$threads" -p "$prompts" -n "$gen" -r "$reps" -o json)
mb=(moefleet bench --model "$gguf" --threads "$threads" --prompt "$prompts"
  --gen "$gen" --repetitions "$reps" --json "$out/moefleet-bench.json")
echo "peer: llama-bench (load $(load))" >&2
l0=$(load)
"$llama/llama-bench" "${lb[@]:1}" >"$out/llama-bench.json"
l1=$(load)
echo "peer: moefleet bench (load $l1)" >&2
"$bin/moefleet" "${mb[@]:1}" >/dev/null
l2=$(load)

# Served: the same sweep against llama-server and against our fleet, level by level: for each
# level C a fresh llama-server with C slots (each with room for the longest prompt and the output
# cap), its two passes at C, then a fresh fleet and its two passes at C (served-llama/cC/,
# served-moefleet/cC/). One llama-server sized for the largest level slows every pass after that
# level: with a KV stream per slot (its default with -np) a batch's attention spans every stream
# between its lowest and highest slot id, and the passes after the largest level take scattered
# slots; with --kv-unified one buffer holds every slot's cells and attention spans all of them
# (results/llama-server-slots-20261203). LLAMA_ARGS adds llama-server arguments.
read -r -a extra <<<"${LLAMA_ARGS:-}"
source "$(dirname "$0")/fleet.sh"
source "$(dirname "$0")/llama_server.sh"
stop_all() { fleet_stop; llama_stop; }
trap stop_all EXIT
l3=$(load); l4=""
for c in $(tr ',' ' ' <<<"$levels"); do
  mkdir -p "$out/served-llama" "$out/served-moefleet"
  llama_start "$llama" "$out/served-llama/c$c.log" -m "$gguf" -t 2 -np "$c" -c $((c * 384)) --alias "$alias" "${extra[@]}"
  echo "peer: C = $c against llama-server -np $c (load $(load))" >&2
  "$bin/moefleet-harness" sweep --plan "$plan" --levels "$c" --url "$LLAMA_URL" --out "$out/served-llama/c$c"
  llama_stop
  fleet_start "$out/served-moefleet/c$c.log" "$bin/moefleet" --model "$gguf" ${roles:+--roles "$roles"}
  [ -n "$l4" ] || l4=$(load)
  echo "peer: C = $c against the ${roles:-default}-role fleet (load $(load))" >&2
  "$bin/moefleet-harness" sweep --plan "$plan" --levels "$c" --url "$FLEET_URL" --out "$out/served-moefleet/c$c"
  fleet_stop
  for side in served-llama served-moefleet; do "$bin/moefleet-harness" analyze "$out/$side/c$c" >/dev/null; done
done
l5=$(load)
trap - EXIT
ls=(llama-server -m "$gguf" -t 2 -np C -c "C*384" --alias "$alias" "${extra[@]}" --host 127.0.0.1 --port PORT)
sw=(moefleet-harness sweep --plan "$plan" --levels C)
fs="moefleet serve --model $(basename "$gguf")${roles:+ --roles $roles}"
flags=$(cat "$llama/moefleet-build-flags" 2>/dev/null || echo "native")
python3 - "$out/peer.json" "$gguf" "$l0" "$l1" "$l2" "$l3" "$l4" "$l5" "${lb[*]}" "${mb[*]}" "${ls[*]}" "$fs" "${sw[*]}" "$flags" "$source_note" "$served" <<'PY'
import hashlib, json, os, sys
path, gguf, l0, l1, l2, l3, l4, l5, lb, mb, ls, fs, sw, flags, source, served = sys.argv[1:]
digest = hashlib.sha256()
with open(gguf, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        digest.update(chunk)
name = lambda c: c.replace(gguf, os.path.basename(gguf))
record = {
    "record": "peer_run",
    "git_commit": os.popen("git rev-parse HEAD 2>/dev/null").read().strip() or None,
    "git_dirty": bool(os.popen("git --no-optional-locks status --porcelain --untracked-files=no 2>/dev/null").read().strip()),
    "gguf": os.path.basename(gguf),
    "llama_build_flags": flags,
    "gguf_bytes": os.path.getsize(gguf),
    "gguf_sha256": digest.hexdigest(),
    "gguf_source": source,
    "moefleet_reads": "the same file",
    "load_average": {"before_llama": l0.split(), "after_llama": l1.split(), "after_moefleet": l2.split(),
                     "before_llama_server": l3.split(), "before_fleet": l4.split(), "after_fleet": l5.split()},
    "served": served,
    "commands": {"llama_bench": name(lb), "moefleet_bench": name(mb), "llama_server": name(ls),
                 "fleet": name(fs), "sweep": sw + " --url URL --out DIR"},
}
if served == "none":
    # nothing was served: no served commands, no load averages of phases that did not run
    for k in ("llama_server", "fleet", "sweep"):
        record["commands"].pop(k)
    for k in ("before_llama_server", "before_fleet", "after_fleet"):
        record["load_average"].pop(k)
json.dump(record, open(path, "w"), indent=2)
PY
"$bin/moefleet-harness" peer "$out"
