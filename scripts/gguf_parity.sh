#!/usr/bin/env bash
# Greedy parity with llama.cpp on one GGUF file (issue 30, item 6). The committed prompts
# (workloads/gguf_parity/prompts.jsonl) are continued greedily for up to N_PREDICT tokens:
#   a. by llama-server (scripts/gguf_parity_llama.sh: OUT/llama.jsonl, the prompt ids it tokenised,
#      its tokens and top-2 log-probabilities per position; OUT/meta.json);
#   b. by `moefleet continue` in one process from the same prompt ids (OUT/moefleet.jsonl, the
#      same shape), so that the comparison is of the models, not of the tokenizers;
#   c. by a fleet of ROLES `moefleet serve` roles, the same ids through /v1/completions
#      (OUT/fleet.jsonl: ids only; scripts/gguf_parity.py fleet);
#   d. OUT/meta.json gains the engine commit, the host (`moefleet-harness host`), each stage's
#      seconds and load averages, the commands and the binary's sha256; then
#      `moefleet-harness parity OUT` writes parity.csv, PARITY.md and parity.png/.svg.
# Usage: scripts/gguf_parity.sh [OUT_DIR]   (default results/gguf-parity-YYYYMMDD)
#   env: MODEL=FILE.gguf (default SmolLM2-135M-Instruct Q4_1, scripts/smollm2_model.sh), ROLES=5,
#        N_PREDICT=128, CONCURRENCY=4 (fleet requests in flight), PROMPTS=<jsonl>,
#        ENGINE_ONLY=1 (keep OUT/llama.jsonl and its meta.json; re-run b-d only),
#        MOEFLEET / HARNESS (binaries; default $CARGO_TARGET_DIR/release or target/release)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:-$root/results/gguf-parity-$(date -u +%Y%m%d)}
model=${MODEL:-$("$here/smollm2_model.sh")}
roles=${ROLES:-5}
n_predict=${N_PREDICT:-128}
concurrency=${CONCURRENCY:-4}
target=${CARGO_TARGET_DIR:-$root/target}
moefleet=${MOEFLEET:-$target/release/moefleet}
harness=${HARNESS:-$target/release/moefleet-harness}
for b in "$moefleet" "$harness"; do
  [ -x "$b" ] || { echo "gguf_parity: $b not built (cargo build --release)" >&2; exit 1; }
done
mkdir -p "$out"
tmp=$(mktemp -d)
source "$here/fleet.sh"
trap 'fleet_stop; rm -rf "$tmp"' EXIT
binary_sha=$(sha256sum "$moefleet" | cut -d' ' -f1)
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
now() { date +%s.%N; }
secs() { python3 -c "print(round($(now) - $1, 1))"; }
stages=() loads=()

# a. llama-server
if [ "${ENGINE_ONLY:-0}" = 1 ]; then
  [ -s "$out/llama.jsonl" ] && [ -s "$out/meta.json" ] || { echo "gguf_parity: ENGINE_ONLY=1 needs $out/llama.jsonl and meta.json" >&2; exit 1; }
  echo "gguf_parity: a. llama-server: kept $out/llama.jsonl" >&2
else
  l0=$(loadavg) t0=$(now)
  PROMPTS=${PROMPTS:-$root/workloads/gguf_parity/prompts.jsonl} N_PREDICT=$n_predict \
    "$here/gguf_parity_llama.sh" "$out" "$model"
  stages+=(--stage "llama=$(secs "$t0")") loads+=(--load "llama=$l0/$(loadavg)")
  echo "gguf_parity: a. llama-server: ${stages[-1]#*=} s" >&2
fi
python3 "$here/gguf_parity.py" ids "$out/llama.jsonl" "$tmp/prompt_ids.jsonl"

# b. one process
l0=$(loadavg) t0=$(now)
continue_cmd="moefleet continue --model $(basename "$model") --prompts prompt_ids.jsonl --max-tokens $n_predict --out moefleet.jsonl"
"$moefleet" continue --model "$model" --prompts "$tmp/prompt_ids.jsonl" --max-tokens "$n_predict" \
  --out "$out/moefleet.jsonl"
stages+=(--stage "moefleet_continue=$(secs "$t0")") loads+=(--load "moefleet_continue=$l0/$(loadavg)")
echo "gguf_parity: b. moefleet continue: ${stages[-1]#*=} s" >&2

# c. a fleet
l0=$(loadavg) t0=$(now)
fleet_cmd="moefleet serve --model $(basename "$model") --roles $roles"
fleet_start "$tmp/fleet.log" "$moefleet" --model "$model" --roles "$roles"
python3 "$here/gguf_parity.py" fleet "$FLEET_URL" "$out/llama.jsonl" "$out/fleet.jsonl" \
  --max-tokens "$n_predict" --concurrency "$concurrency"
curl -sf "$FLEET_URL/api/stats" >"$tmp/stats.json"
fleet_stop
gzip -c "$tmp/fleet.log" >"$out/fleet-serve.log.gz"
stages+=(--stage "moefleet_fleet=$(secs "$t0")") loads+=(--load "moefleet_fleet=$l0/$(loadavg)")
echo "gguf_parity: c. fleet of $roles roles: ${stages[-1]#*=} s" >&2

# d. the record and the tables
[ "$(sha256sum "$moefleet" | cut -d' ' -f1)" = "$binary_sha" ] ||
  { echo "gguf_parity: $moefleet changed during the run; run again" >&2; exit 1; }
"$harness" host >"$tmp/host.json"
python3 "$here/gguf_parity.py" meta "$out" --host "$tmp/host.json" --stats "$tmp/stats.json" \
  "${stages[@]}" "${loads[@]}" --continue-cmd "$continue_cmd" --fleet-cmd "$fleet_cmd" \
  --roles "$roles" --concurrency "$concurrency" --binary-sha256 "$binary_sha"
"$harness" parity "$out" >/dev/null
commit=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('engine_commit'))" "$tmp/stats.json")
case $commit in
  unknown | *-dirty) echo "gguf_parity: warning: the engine was built from $commit, not a committed tree" >&2 ;;
esac
echo "gguf_parity: $out (stages: ${stages[*]})" >&2
