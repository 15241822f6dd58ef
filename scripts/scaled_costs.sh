#!/usr/bin/env bash
# What the bandwidth-scaled prediction of the fleet simulator (`simulate paper --ceilings
# --backends`) is computed from, measured back to back on this machine: its ceilings (memory read
# bandwidth on all threads) and the native time of one `inkling` MoE layer at one row.
# Usage: scripts/scaled_costs.sh OUT BIN_DIR
set -euo pipefail
out=${1:?out dir}; bin=${2:?bin dir}
mkdir -p "$out"
"$bin/moefleet-harness" ceilings --out "$out"
"$bin/moefleet-harness" backends --out "$out" --rows 1 --calls 31 --tokens 32 --rounds 2
