#!/usr/bin/env bash
# The main job: start the inkling-mini fleet (11 roles on this machine), wait for readiness, replay
# a sweep plan, analyse, draw figures, and stop the fleet whatever happens; then the kernel, dense
# and context experiments (each starts and stops what it needs).
# Usage: scripts/reproduce.sh PLAN RUN_DIR BIN_DIR
set -euo pipefail
plan=${1:?plan}; run=${2:?run dir}; bin=${3:?bin dir}
preset=${PRESET:-inkling-mini}; roles=${ROLES:-11}
if [ -e "$run/run.json" ]; then echo "reproduce: $run already holds a run; remove it or set RUN=" >&2; exit 1; fi
mkdir -p "$run"
log="$run/fleet.log"
"$bin/moefleet" serve --preset "$preset" --roles "$roles" --port 0 --profile-dir "$run/profiles" >"$log" 2>&1 &
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
  kill -0 "$fleet" 2>/dev/null || { echo "reproduce: the fleet exited; see $log" >&2; cat "$log" >&2; exit 1; }
  sleep 0.5
done
curl -sf "$url/health" >/dev/null || { echo "reproduce: the fleet did not become ready; see $log" >&2; exit 1; }
echo "reproduce: $preset fleet of $roles roles ready at $url; running plan '$plan' into $run" >&2
start=$(date +%s)
"$bin/moefleet-harness" sweep --url "$url" --plan "$plan" --out "$run"
echo "reproduce: sweep took $(( $(date +%s) - start )) s" >&2
stop
trap - EXIT
"$bin/moefleet-harness" analyze "$run"
"$bin/moefleet-harness" figures "$run"
"$bin/moefleet" inspect inkling --json >"$run/inspect-inkling.json"
"$bin/moefleet" inspect "$preset" --json >"$run/inspect-$preset.json"
"$bin/moefleet" generate --preset "$preset" --prompt "The river runs past the old mill and the" --max-tokens 128 --record "$run/single_process.json" >/dev/null
scripts/experiments.sh "$run" "$bin" "$plan"
"$bin/moefleet-harness" report "$run"
"$bin/moefleet-harness" verify
echo "reproduce: done: $run/REPORT.md" >&2
