#!/usr/bin/env bash
# The main job: start the inkling-mini fleet (11 roles on this machine), wait for readiness, replay
# a sweep plan, analyse, draw figures, and stop the fleet whatever happens; then the kernel, dense
# and context experiments (each starts and stops what it needs). The sweep's frame records
# (--profile-dir) calibrate the fleet simulator, which is checked at the levels it was not
# calibrated on and against the paper's Table 4.
# Usage: scripts/reproduce.sh PLAN RUN_DIR BIN_DIR
set -euo pipefail
plan=${1:?plan}; run=${2:?run dir}; bin=${3:?bin dir}
preset=${PRESET:-inkling-mini}; roles=${ROLES:-11}
if [ -e "$run/run.json" ]; then echo "reproduce: $run already holds a run; remove it or set RUN=" >&2; exit 1; fi
mkdir -p "$run"
source "$(dirname "$0")/fleet.sh"
trap fleet_stop EXIT
fleet_start "$run/fleet.log" "$bin/moefleet" --preset "$preset" --roles "$roles" --profile-dir "$run/profiles"
url=$FLEET_URL
echo "reproduce: $preset fleet of $roles roles ready at $url; running plan '$plan' into $run" >&2
start=$(date +%s)
"$bin/moefleet-harness" sweep --url "$url" --plan "$plan" --out "$run"
echo "reproduce: sweep took $(( $(date +%s) - start )) s" >&2
fleet_stop
trap - EXIT
"$bin/moefleet-harness" analyze "$run"
"$bin/moefleet-harness" figures "$run"
# the fleet simulator: calibrated on every other level of this sweep's frame records and checked at
# the others (after the kernel experiments, calibrated from the paper's profiles against its
# Table 4, and the predictions, one of them from the experiments' ceilings and backends records)
"$bin/moefleet-harness" simulate validate --run "$run" --out "$run/simulator/local"
"$bin/moefleet" inspect inkling --json >"$run/inspect-inkling.json"
"$bin/moefleet" inspect "$preset" --json >"$run/inspect-$preset.json"
"$bin/moefleet" generate --preset "$preset" --prompt "The river runs past the old mill and the" --max-tokens 128 --record "$run/single_process.json" >/dev/null
scripts/experiments.sh "$run" "$bin" "$plan"
"$bin/moefleet-harness" simulate paper --local "$run/simulator/local" --out "$run/simulator/paper" \
  --ceilings "$run/kernels/ceilings.json" --backends "$run/openvino/backends.json" >/dev/null
"$bin/moefleet-harness" report "$run"
"$bin/moefleet-harness" verify
echo "reproduce: done: $run/REPORT.md" >&2
