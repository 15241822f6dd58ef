#!/usr/bin/env bash
# Speculation (MEASUREMENTS.md §6): the inkling-mini fleet once without speculation and once per
# proposer set (suffix, phrase, draft, all three), each a fresh fleet serving the speculation plan
# (one prompt per family, one request at a time, a first and then a repeated pass) with role 0's
# frame and reply records, the phrase table alone at several depths of proposals in flight, and
# speculation off again at the end (the drift over the session); then the tables (Table 3,
# on/off, the first-order model, depth) and the figure.
# Only role 0's records are kept (gzipped, in records/): the other roles' are not used.
# Usage: scripts/speculation.sh OUT_DIR BIN_DIR PLAN
set -euo pipefail
out=${1:?out dir}; bin=${2:?bin dir}; plan=${3:?plan}
preset=${PRESET:-inkling-mini}; roles=${ROLES:-11}
splan=workloads/plans/speculation.toml
[ "$plan" = quick ] && splan=workloads/plans/speculation-quick.toml
mkdir -p "$out"
source "$(dirname "$0")/fleet.sh"
trap fleet_stop EXIT
run_config() {
  local name=$1; shift
  mkdir -p "$out/$name"
  fleet_start "$out/$name/fleet.log" "$bin/moefleet" --preset "$preset" --roles "$roles" \
    --profile-dir "$out/$name/profiles" "$@"
  echo "speculation: $name ready at $FLEET_URL" >&2
  "$bin/moefleet-harness" sweep --url "$FLEET_URL" --plan "$splan" --out "$out/$name"
  fleet_stop
  # role 0's records are kept (gzipped, in records/); the other roles' are not used
  mkdir -p "$out/$name/records"
  gzip -c "$out/$name/profiles/role-0.jsonl" >"$out/$name/records/role-0.jsonl.gz"
  gzip -c "$out/$name/profiles/role-0-replies.jsonl" >"$out/$name/records/role-0-replies.jsonl.gz"
  rm -rf "$out/$name/profiles"
}
run_config off
run_config suffix --speculate --proposers suffix
run_config phrase --speculate --proposers phrase
run_config draft --speculate --proposers draft
run_config all --speculate --proposers suffix,phrase,draft
# how many proposals in flight: the phrase table alone at several depths
depths="2 4 8 16 24 32 48 64"
[ "$plan" = quick ] && depths="2 6"
for d in $depths; do
  run_config "depth/depth-$d" --speculate --proposers phrase --spec-depth "$d"
done
# speculation off once more: how far the machine drifted over the session
run_config off-again
trap - EXIT
"$bin/moefleet-harness" speculation "$out"
