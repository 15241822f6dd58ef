# Sourced by scripts/peer.sh, peer_slots.sh, smollm2.sh and gguf_parity_llama.sh: one llama-server at a time.
#   llama_start LLAMA_BIN_DIR LOG ARGS...   start `llama-server ARGS --host 127.0.0.1 --port P` on a
#                                           free port, log to LOG, wait until /health answers;
#                                           sets LLAMA_URL and LLAMA_PID
#   llama_stop                              stop it (safe to call when none runs)
LLAMA_PID=""
LLAMA_URL=""
llama_start() {
  local dir=$1 log=$2
  shift 2
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$dir/llama-server" "$@" --host 127.0.0.1 --port "$port" >"$log" 2>&1 &
  LLAMA_PID=$!
  LLAMA_URL=http://127.0.0.1:$port
  for _ in $(seq 600); do
    curl -sf "$LLAMA_URL/health" >/dev/null 2>&1 && return 0
    kill -0 "$LLAMA_PID" 2>/dev/null || { echo "llama-server exited; see $log" >&2; exit 1; }
    sleep 0.5
  done
  echo "llama-server not ready within 300 s; see $log" >&2
  exit 1
}
llama_stop() {
  if [ -n "$LLAMA_PID" ]; then kill "$LLAMA_PID" 2>/dev/null || true; wait "$LLAMA_PID" 2>/dev/null || true; fi
  LLAMA_PID=""
}
