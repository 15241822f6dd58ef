#!/usr/bin/env bash
# Captured-state draft replay (MEASUREMENTS.md §5): start the inkling-mini fleet with captures on
# request, build the capture corpus through its API (36 evaluation sequences, three per family,
# and a disjoint training set), stop the fleet, fit the draft head to the training captures and
# replay it over the evaluation captures: OUT/corpus, OUT/head, OUT/replay (Table 6, the chain
# table, Figure 8). The quick plan captures fewer positions and a smaller training set.
# Usage: scripts/draft.sh OUT_DIR BIN_DIR PLAN
set -euo pipefail
out=${1:?out dir}; bin=${2:?bin dir}; plan=${3:?plan}
preset=${PRESET:-inkling-mini}; roles=${ROLES:-11}
if [ "$plan" = quick ]; then tokens=48; train=6; else tokens=160; train=24; fi
mkdir -p "$out"
source "$(dirname "$0")/fleet.sh"
trap fleet_stop EXIT
fleet_start "$out/fleet.log" "$bin/moefleet" --preset "$preset" --roles "$roles" \
  --capture-dir "$out/server-captures" --capture requested
url=$FLEET_URL
"$bin/moefleet-harness" capture --url "$url" --out "$out/corpus" --tokens "$tokens" \
  --eval-per-family 3 --train-per-family "$train" --concurrency 48
fleet_stop
trap - EXIT
rm -rf "$out/server-captures"   # the corpus holds checked copies
"$bin/moefleet-harness" fit-draft "$out/corpus" --out "$out/head"
"$bin/moefleet-harness" fit-draft "$out/corpus" --out "$out/control-head" --shuffle-targets 11
"$bin/moefleet-harness" replay "$out/corpus" --head "$out/head" --control-head "$out/control-head" \
  --out "$out/replay" --paper-overlay
