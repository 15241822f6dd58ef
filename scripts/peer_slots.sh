#!/usr/bin/env bash
# Why llama-server's descending passes were slower than its ascending ones in the served
# comparison (issue 29): the same sweep (paper plan at LEVELS, default 8,176: ascending 8, 176,
# then descending 176, 8) against llama-server on the peer GGUF in three configurations, each a
# fresh server with its log kept (the log names the slot each request took):
#   split/    -np 176, one KV stream per slot (llama-server's default when -np is given), as the
#             committed peer runs were configured
#   unified/  -np 176 --kv-unified: one KV buffer shared by every slot
#   per-level/cN/  a fresh server per level with -np N (slots sized to the load), one sweep each
# Each run is analysed (phases.csv, curve.csv); run.json holds the host and load averages.
# Usage: scripts/peer_slots.sh OUT_DIR BIN_DIR
set -euo pipefail
out=${1:?out dir}; bin=${2:?bin dir}
preset=${PRESET:-inkling-mini}; seed=${SEED:-7}; levels=${LEVELS:-8,176}
mkdir -p "$out"
llama=$("$(dirname "$0")/peer_build.sh")
cache=${MOEFLEET_PEER_CACHE:-$HOME/.cache/moefleet/peer}/models
gguf=$cache/$preset-seed$seed.gguf
if [ ! -f "$gguf" ]; then
  mkdir -p "$cache"
  "$bin/moefleet" inspect --json "$preset" >"$out/preset.json"
  python3 "$(dirname "$0")/peer_gguf.py" --config "$out/preset.json" \
    --tokenizer workloads/tokenizer.json --seed "$seed" --out "$gguf.tmp"
  mv "$gguf.tmp" "$gguf"
fi
source "$(dirname "$0")/llama_server.sh"
trap llama_stop EXIT
# serve SLOTS LOG [extra llama-server args...]: a fresh llama-server with SLOTS slots; sets URL
serve() {
  local slots=$1 log=$2
  shift 2
  local args=(-m "$gguf" -t 2 -np "$slots" -c $((slots * 384)) --alias "$preset" "$@")
  echo "llama-server ${args[*]}" | sed "s|$gguf|$(basename "$gguf")|" >"$log.command"
  llama_start "$llama" "$log" "${args[@]}"
  URL=$LLAMA_URL
}
top=$(tr ',' '\n' <<<"$levels" | sort -n | tail -n 1)
sweep() { "$bin/moefleet-harness" sweep --plan paper --levels "$1" --url "$URL" --out "$2"; "$bin/moefleet-harness" analyze "$2" >/dev/null; }

echo "peer_slots: split KV, -np $top (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
serve "$top" "$out/split.log"; sweep "$levels" "$out/split"; llama_stop
echo "peer_slots: unified KV, -np $top (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
serve "$top" "$out/unified.log" --kv-unified; sweep "$levels" "$out/unified"; llama_stop
for c in $(tr ',' ' ' <<<"$levels"); do
  echo "peer_slots: a fresh server with -np $c (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  mkdir -p "$out/per-level"
  serve "$c" "$out/per-level/c$c.log"; sweep "$c" "$out/per-level/c$c"; llama_stop
done
trap - EXIT
echo "peer_slots: wrote $out" >&2
