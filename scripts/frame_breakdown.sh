#!/usr/bin/env bash
# Where a token's time goes at one, two and four streams (the fleet simulator's C = 2 miss): the
# 11-role inkling-mini fleet with frame records serves workloads/plans/breakdown.toml; the records
# are reduced to OUT/frames.jsonl.gz (the fields the breakdown reads) and tabled by
# scripts/frame_breakdown.py into OUT/breakdown.md.
# Usage: scripts/frame_breakdown.sh OUT_DIR BIN_DIR
set -euo pipefail
out=${1:?out dir}; bin=${2:?bin dir}
if [ -e "$out/run.json" ]; then echo "frame_breakdown: $out already holds a run" >&2; exit 1; fi
mkdir -p "$out"
source "$(dirname "$0")/fleet.sh"
trap fleet_stop EXIT
fleet_start "$out/fleet.log" "$bin/moefleet" --preset inkling-mini --roles 11 --profile-dir "$out/profiles"
"$bin/moefleet-harness" sweep --url "$FLEET_URL" --plan workloads/plans/breakdown.toml --out "$out"
fleet_stop
trap - EXIT
"$bin/moefleet-harness" analyze "$out" >/dev/null
python3 - "$out" <<'PY'
import glob, gzip, json, sys
keep = ("role", "seq", "group", "rows", "alone", "start_s", "epoch_s", "compute_ns", "cpu_ns")
with gzip.open(f"{sys.argv[1]}/frames.jsonl.gz", "wt") as out:
    for path in sorted(glob.glob(f"{sys.argv[1]}/profiles/role-*.jsonl")):
        if path.endswith("-replies.jsonl"):
            continue
        for line in open(path):
            r = json.loads(line)
            out.write(json.dumps({k: r[k] for k in keep}) + "\n")
PY
python3 "$(dirname "$0")/frame_breakdown.py" "$out"
