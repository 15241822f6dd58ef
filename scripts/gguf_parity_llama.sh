#!/usr/bin/env bash
# llama-server's reference outputs for the GGUF parity check (issue 30): serves a GGUF with
# llama.cpp's llama-server (one slot, default flash-attention setting, so the reference is what a
# user of llama-server gets), then for every prompt of PROMPTS records the prompt's token ids,
# 128 greedy tokens (fewer at EOS) and the top-2 log-probabilities at each generated position
# (scripts/gguf_parity_llama.py collect). Writes OUT_DIR/llama.jsonl, OUT_DIR/meta.json (llama.cpp
# version and build flags, the model's sha256, the server arguments, the host, the date) and
# OUT_DIR/llama-server.log.gz. Nothing here runs moefleet's engine.
# Usage: scripts/gguf_parity_llama.sh OUT_DIR [MODEL.gguf]
#   (default model: SmolLM2-135M-Instruct Q4_1, scripts/smollm2_model.sh;
#    env: PROMPTS=workloads/gguf_parity/prompts.jsonl  N_PREDICT=128  THREADS=2  LLAMA_BIN=<dir>)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?out dir}
model=${2:-$("$here/smollm2_model.sh")}
prompts=${PROMPTS:-$here/../workloads/gguf_parity/prompts.jsonl}
n_predict=${N_PREDICT:-128}
bin=${LLAMA_BIN:-$("$here/peer_build.sh")}
mkdir -p "$out"
source "$here/llama_server.sh"
trap llama_stop EXIT
# one slot; the context holds the longest prompt plus n_predict many times over; -lv 4 only makes
# the log say how the context resolved (flash attention, KV types, batch sizes) for meta.json
args=(-m "$model" -t "${THREADS:-2}" -np 1 -c 4096 --alias gguf-parity -lv 4)
t0=$(date +%s.%N)
llama_start "$bin" "$out/llama-server.log" "${args[@]}"
python3 "$here/gguf_parity_llama.py" collect "$LLAMA_URL" "$prompts" "$out" --model "$model" --n-predict "$n_predict"
llama_stop
trap - EXIT
secs=$(python3 -c "import sys; print(round($(date +%s.%N) - $t0, 1))")
python3 "$here/gguf_parity_llama.py" meta "$out" --bin "$bin" --model "$model" \
  --args "llama-server ${args[*]/#$model/$(basename "$model")}" --log "$out/llama-server.log" \
  --n-predict "$n_predict" --seconds "$secs"
gzip -f "$out/llama-server.log"
echo "gguf_parity_llama: $out ($secs s)" >&2
