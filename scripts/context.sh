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
  "$bin/moefleet-harness" probe "$out/probe-inkling-$mode" "$out/probe-mini-$mode"
done

source "$(dirname "$0")/fleet.sh"
trap fleet_stop EXIT
for mode in serial parallel; do
  fleet_start "$out/fleet-$mode.log" "$bin/moefleet" --preset inkling-mini --roles "$roles" \
    --attention "$mode" --context $((scan_max * 2 + 1024))
  url=$FLEET_URL
  "$bin/moefleet-harness" context --url "$url" --out "$out/scan-$mode" --sizes "$sizes" \
    --budget-s "$budget"
  fleet_stop
done
trap - EXIT

"$bin/moefleet-harness" context-fit "$out"
# the same fit over the paper's published scan and probe (checks of its arithmetic)
mkdir -p "$out/paper/scan-paper" "$out/paper/probe-paper"
cp reproduction/paper/context.csv "$out/paper/scan-paper/"
cp reproduction/paper/context_probe.csv "$out/paper/probe-paper/"
"$bin/moefleet-harness" context-fit "$out/paper" --preset inkling --roles 11 \
  --title "Figure 7 from the paper's published context scan and probe (reproduction/paper)"
