#!/usr/bin/env bash
# How this directory was made (host E, engine commit e91870a): the 11-role inkling-mini fleet at
# one stream (paper plan, level 1, both passes), four repeats alternating the default pipeline
# groups (one per role) and `--groups 1`, each on a fresh fleet; log.txt is its output.
#   results/groups-c1-20261206-e/run.sh OUT_DIR   (from the repository root, after make build)
set -euo pipefail
OUT=${1:?out dir}
B=${BIN:-target/release}
source scripts/fleet.sh
trap fleet_stop EXIT
for rep in 1 2 3 4; do
  for g in default 1; do
    extra=(); [ $g = 1 ] && extra=(--groups 1)
    fleet_start "$OUT/fleet.log" "$B/moefleet" --preset inkling-mini --roles 11 "${extra[@]}"
    echo "rep $rep groups=$g load $(cut -d' ' -f1-3 /proc/loadavg)"
    "$B/moefleet-harness" sweep --url "$FLEET_URL" --plan paper --levels 1 --out "$OUT/rep$rep-groups-$g" 2>&1 | grep "mixed_"
    "$B/moefleet-harness" analyze "$OUT/rep$rep-groups-$g" >/dev/null
    fleet_stop
  done
done
