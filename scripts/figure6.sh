#!/usr/bin/env bash
# Figure 6 (paper §5.3) into OUT_DIR: the burst plan (workloads/plans/burst.toml: fifteen requests
# released together, 128-token cap, three retained phases) against the inkling-mini fleet with
# reference admission (whole prompts, one at a time) and then with eight-row prefill windows, each
# sweep analysed; then `moefleet-harness figure6` (median TTFT and whole-phase tokens per second per
# phase, the paper's values as markers).
# Usage: scripts/figure6.sh OUT_DIR BIN_DIR
set -euo pipefail
out=${1:?out dir}; bin=${2:?bin dir}
roles=${ROLES:-11}
mkdir -p "$out"
source "$(dirname "$0")/fleet.sh"
trap fleet_stop EXIT
for mode in reference windowed; do
  fleet_start "$out/fleet-$mode.log" "$bin/moefleet" --preset inkling-mini --roles "$roles" \
    --admission "$mode" --window 8
  echo "figure6: $mode admission (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  "$bin/moefleet-harness" sweep --url "$FLEET_URL" --plan workloads/plans/burst.toml --out "$out/$mode"
  fleet_stop
  "$bin/moefleet-harness" analyze "$out/$mode" >/dev/null
done
trap - EXIT
"$bin/moefleet-harness" figure6 --reference "$out/reference" --windowed "$out/windowed" --out "$out"
