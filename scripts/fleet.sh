# Sourced by the experiment scripts: start a fleet and wait until it serves, and stop it.
#
# fleet_start LOG MOEFLEET [serve args...]: runs `MOEFLEET serve --port 0 ARGS` in the background,
#   logging to LOG, and returns once /health answers, with FLEET_PID and FLEET_URL set; if the fleet
#   exits or is not ready within 300 s, the script stops with LOG (or its end) shown. Callers stop the fleet with
#   fleet_stop, also from their EXIT trap so that no role outlives a failed script.
# fleet_stop: SIGINT, up to 10 s to exit, then SIGKILL; does nothing when no fleet runs.

FLEET_PID=""
FLEET_URL=""

fleet_start() {
  local log=$1 moefleet=$2
  shift 2
  "$moefleet" serve --port 0 "$@" >"$log" 2>&1 &
  FLEET_PID=$!
  FLEET_URL=""
  for _ in $(seq 600); do
    FLEET_URL=$(grep -o 'http://[0-9.:]*' "$log" | head -n 1 || true)
    [ -n "$FLEET_URL" ] && curl -sf "$FLEET_URL/health" >/dev/null 2>&1 && return 0
    if ! kill -0 "$FLEET_PID" 2>/dev/null; then
      echo "fleet: $moefleet serve $* exited; its log ($log):" >&2
      cat "$log" >&2
      exit 1
    fi
    sleep 0.5
  done
  echo "fleet: not ready within 300 s; the end of its log ($log):" >&2
  tail -n 40 "$log" >&2
  exit 1
}

fleet_stop() {
  [ -n "$FLEET_PID" ] || return 0
  kill -INT "$FLEET_PID" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$FLEET_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$FLEET_PID" 2>/dev/null || true
  wait "$FLEET_PID" 2>/dev/null || true
  FLEET_PID=""
}
