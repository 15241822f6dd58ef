#!/usr/bin/env bash
# Stage-level effect of the dense form (MEASUREMENTS.md §4): start the inkling-mini fleet with
# per-frame profiles, once with --dense-form three-matmul and once with fused-slices, drive the same
# short fixed load (levels 1 and 8, 16-token outputs), stop the fleet, then summarise role 0's
# compute per frame of both runs with `moefleet-harness dense-stage`.
# Usage: scripts/dense_stage.sh OUT_DIR BIN_DIR
# Writes OUT_DIR/{three-matmul,fused-slices}/{profiles/,fleet.log}, OUT_DIR/dense_stage.csv and
# OUT_DIR/dense_stage.json. Takes a few minutes.
set -euo pipefail
out=${1:?out dir}; bin=${2:?bin dir}
preset=${PRESET:-inkling-mini}; roles=${ROLES:-11}
for f in three-matmul fused-slices; do
  if [ -e "$out/$f/profiles" ]; then echo "dense_stage: $out/$f already holds a run; remove it" >&2; exit 1; fi
done
mkdir -p "$out"
tmp=$(mktemp -d)
source "$(dirname "$0")/fleet.sh"
cleanup() { fleet_stop; rm -rf "$tmp"; }
trap cleanup EXIT

# The fixed load: the quick plan's shape (paired passes, 16-token outputs, at least 12 requests per
# phase) at levels 1 and 8, so role 0 sees 1-row and up-to-8-row decode frames.
cat >"$tmp/plan.toml" <<'EOF'
name = "dense-stage"
levels = [1, 8]
max_tokens = 16
stagger_s = 0.015
settle_s = 0.5
min_requests = 12
family = "mixed"

[[passes]]
name = "mixed_a"
order = "ascending"

[[passes]]
name = "mixed_b"
order = "descending"
EOF

run_form() {
  local form=$1 dir="$out/$1"
  mkdir -p "$dir"
  fleet_start "$dir/fleet.log" "$bin/moefleet" --preset "$preset" --roles "$roles" \
    --profile-dir "$dir/profiles" --dense-form "$form"
  local url=$FLEET_URL
  echo "dense_stage: $preset fleet ($form) ready at $url" >&2
  local start; start=$(date +%s)
  "$bin/moefleet-harness" sweep --url "$url" --plan "$tmp/plan.toml" --levels 1,8 --out "$tmp/sweep-$form"
  echo "dense_stage: $form load took $(( $(date +%s) - start )) s" >&2
  fleet_stop
}

run_form three-matmul
run_form fused-slices
"$bin/moefleet-harness" dense-stage --three "$out/three-matmul/profiles" \
  --fused "$out/fused-slices/profiles" --out "$out"
echo "dense_stage: done: $out/dense_stage.csv and $out/dense_stage.json" >&2
