#!/usr/bin/env bash
# Role-level effect of an engine change: the inkling-mini fleet of each of two `moefleet` binaries
# (e.g. built from the commits before and after the kernel work) under the same plan, one after the
# other in one session, each sweep analysed to curve.csv.
# Usage: scripts/before_after.sh OUT_DIR HARNESS_BIN BEFORE_MOEFLEET AFTER_MOEFLEET [PLAN]
set -euo pipefail
out=${1:?out dir}; harness=${2:?moefleet-harness}; before=${3:?before binary}; after=${4:?after binary}
plan=${5:-workloads/plans/before-after.toml}
mkdir -p "$out"
source "$(dirname "$0")/fleet.sh"
trap fleet_stop EXIT
for which in before after; do
  bin=$before; [ "$which" = after ] && bin=$after
  fleet_start "$out/fleet-$which.log" "$bin" --preset inkling-mini --roles 11
  url=$FLEET_URL
  "$harness" sweep --url "$url" --plan "$plan" --out "$out/$which"
  fleet_stop
  "$harness" analyze "$out/$which"
done
trap - EXIT
echo "before_after: $out/before/curve.csv and $out/after/curve.csv" >&2
