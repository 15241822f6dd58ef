#!/usr/bin/env bash
# The 11-role inkling-mini fleet's curve with and without emulated links (serve --link-rate
# --link-latency): loopback as it is, then the paper's network (gigabit, 0.2 ms one way), then a
# slow link (100 Mbit, 1 ms) where the rate shows; each a fresh fleet serving the links plan with
# its frame records; then `moefleet-harness analyze` of each.
# Usage: scripts/link_emulation.sh OUT_DIR BIN_DIR [PLAN, default workloads/plans/links.toml]
set -euo pipefail
out=${1:?out dir}; bin=${2:?bin dir}; plan=${3:-workloads/plans/links.toml}
mkdir -p "$out"
source "$(dirname "$0")/fleet.sh"
trap fleet_stop EXIT
run_config() {
  local name=$1; shift
  mkdir -p "$out/$name"
  fleet_start "$out/$name/fleet.log" "$bin/moefleet" --preset inkling-mini --roles 11 "$@"
  echo "link_emulation: $name ready at $FLEET_URL" >&2
  "$bin/moefleet-harness" sweep --url "$FLEET_URL" --plan "$plan" --out "$out/$name"
  fleet_stop
  "$bin/moefleet-harness" analyze "$out/$name" >/dev/null
}
run_config loopback
run_config 1gbit-0.2ms --link-rate 1gbit --link-latency 0.2ms
run_config 100mbit-1ms --link-rate 100mbit --link-latency 1ms
trap - EXIT
