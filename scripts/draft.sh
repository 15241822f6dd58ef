#!/usr/bin/env bash
# Captured-state draft replay (MEASUREMENTS.md §5): start the inkling-mini fleet with captures on
# request, build the capture corpus through its API (36 evaluation sequences, three per family,
# and a disjoint training set), stop the fleet, fit the draft head to the training captures and
# replay it over the evaluation captures: OUT/corpus, OUT/head, OUT/replay (Table 6, the chain
# table, Figure 8). The quick plan captures fewer positions and a smaller training set.
# With MODEL=FILE.gguf the fleet serves that checkpoint (its own cut into roles, its tokenizer) and
# the head is the checkpoint's kind (engine/src/model/mtp); EVAL, TRAIN and TOKENS override the
# plan's sizes, PASSAGES adds that many passage prompts per passage task (capture --passages).
# Usage: [MODEL=FILE.gguf] scripts/draft.sh OUT_DIR BIN_DIR PLAN
set -euo pipefail
out=${1:?out dir}; bin=${2:?bin dir}; plan=${3:?plan}
preset=${PRESET:-inkling-mini}; roles=${ROLES:-11}
if [ "$plan" = quick ]; then tokens=48; train=6; else tokens=160; train=24; fi
tokens=${TOKENS:-$tokens}; train=${TRAIN:-$train}; eval=${EVAL:-3}; passages=${PASSAGES:-0}
if [ -n "${MODEL:-}" ]; then
  serve_model=(--model "$MODEL"); model=(--model "$MODEL"); tk=(--tokenizer "$MODEL")
else
  serve_model=(--preset "$preset" --roles "$roles"); model=(); tk=()
fi
mkdir -p "$out"
source "$(dirname "$0")/fleet.sh"
trap fleet_stop EXIT
if [ -f "$out/corpus/corpus.json" ]; then
  echo "draft: keeping the corpus already in $out/corpus" >&2
else
  fleet_start "$out/fleet.log" "$bin/moefleet" "${serve_model[@]}" \
    --capture-dir "$out/server-captures" --capture requested
  "$bin/moefleet-harness" capture --url "$FLEET_URL" --out "$out/corpus" --tokens "$tokens" \
    --eval-per-family "$eval" --train-per-family "$train" --passages "$passages" \
    --concurrency 48 "${tk[@]}"
  fleet_stop
fi
trap - EXIT
rm -rf "$out/server-captures"   # the corpus holds checked copies
"$bin/moefleet-harness" fit-draft "$out/corpus" --out "$out/head" "${model[@]}"
"$bin/moefleet-harness" fit-draft "$out/corpus" --out "$out/control-head" --shuffle-targets 11 \
  "${model[@]}"
"$bin/moefleet-harness" replay "$out/corpus" --head "$out/head" --control-head "$out/control-head" \
  --out "$out/replay" --paper-overlay "${model[@]}"
