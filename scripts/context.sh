#!/usr/bin/env bash
# Context length (MEASUREMENTS.md §3): the in-role probe at `inkling` shapes (one role) and at
# `inkling-mini` (every role), each with the serial and the parallel attention kernel; the
# real-prompt scan through the API of an inkling-mini fleet run once per kernel; then the fit and
# Figure 7. Sizes are capped so the main job stays within its time.
# Usage: scripts/context.sh OUT_DIR BIN_DIR PROBE_MAX SCAN_SIZES SCAN_BUDGET_S (per attention kernel)
set -euo pipefail
out=${1:?out dir}; bin=${2:?bin dir}; probe_max=${3:?probe max}; sizes=${4:?scan sizes, e.g. 1024,2048}
budget=${5:?scan budget in seconds}
scan_max=$(tr ',' '\n' <<<"$sizes" | sort -n | tail -n 1)
roles=${ROLES:-11}
mkdir -p "$out"

for mode in serial parallel; do
  "$bin/moefleet" probe --preset inkling --roles 0 --attention "$mode" \
    --max-context "$probe_max" --out "$out/probe-inkling-$mode"
  "$bin/moefleet" probe --preset inkling-mini --roles all --attention "$mode" \
    --max-context "$probe_max" --out "$out/probe-mini-$mode"
done

for mode in serial parallel; do
  log="$out/fleet-$mode.log"
  "$bin/moefleet" serve --preset inkling-mini --roles "$roles" --port 0 --attention "$mode" \
    --context $((scan_max * 2 + 1024)) >"$log" 2>&1 &
  fleet=$!
  stop() {
    kill -INT "$fleet" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$fleet" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$fleet" 2>/dev/null || true
    wait "$fleet" 2>/dev/null || true
  }
  trap stop EXIT
  url=""
  for _ in $(seq 600); do
    url=$(grep -o 'http://[0-9.:]*' "$log" | head -n 1 || true)
    [ -n "$url" ] && curl -sf "$url/health" >/dev/null 2>&1 && break
    kill -0 "$fleet" 2>/dev/null || { echo "context: the fleet exited; see $log" >&2; exit 1; }
    sleep 0.5
  done
  curl -sf "$url/health" >/dev/null || { echo "context: the fleet did not become ready" >&2; exit 1; }
  "$bin/moefleet-harness" context --url "$url" --out "$out/scan-$mode" --sizes "$sizes" \
    --budget-s "$budget"
  stop
  trap - EXIT
done

"$bin/moefleet-harness" context-fit "$out"
# the same fit over the paper's published scan and probe (checks of its arithmetic)
mkdir -p "$out/paper/scan-paper" "$out/paper/probe-paper"
cp reproduction/paper/context.csv "$out/paper/scan-paper/"
cp reproduction/paper/context_probe.csv "$out/paper/probe-paper/"
"$bin/moefleet-harness" context-fit "$out/paper" --preset inkling --roles 11
