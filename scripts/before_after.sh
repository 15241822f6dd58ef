#!/usr/bin/env bash
# Role-level effect of an engine change: the inkling-mini fleet of each of two `moefleet` binaries
# (e.g. built from the commits before and after the kernel work) under the same plan, one after the
# other in one session, each sweep analysed to curve.csv.
# Usage: scripts/before_after.sh OUT_DIR HARNESS_BIN BEFORE_MOEFLEET AFTER_MOEFLEET [PLAN]
set -euo pipefail
out=${1:?out dir}; harness=${2:?moefleet-harness}; before=${3:?before binary}; after=${4:?after binary}
plan=${5:-workloads/plans/before-after.toml}
mkdir -p "$out"
for which in before after; do
  bin=$before; [ "$which" = after ] && bin=$after
  log="$out/fleet-$which.log"
  "$bin" serve --preset inkling-mini --roles 11 --port 0 >"$log" 2>&1 &
  fleet=$!
  stop() {
    kill -INT "$fleet" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$fleet" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$fleet" 2>/dev/null || true
    wait "$fleet" 2>/dev/null || true
  }
  trap stop EXIT
  url=""
  for _ in $(seq 600); do
    url=$(grep -o 'http://[0-9.:]*' "$log" | head -n 1 || true)
    [ -n "$url" ] && curl -sf "$url/health" >/dev/null 2>&1 && break
    kill -0 "$fleet" 2>/dev/null || { echo "before_after: the $which fleet exited; see $log" >&2; exit 1; }
    sleep 0.5
  done
  "$harness" sweep --url "$url" --plan "$plan" --out "$out/$which"
  stop
  trap - EXIT
  "$harness" analyze "$out/$which"
done
echo "before_after: $out/before/curve.csv and $out/after/curve.csv" >&2
