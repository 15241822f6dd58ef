#!/usr/bin/env bash
# Speculation (MEASUREMENTS.md §6): the inkling-mini fleet once without speculation and once per
# proposer set (suffix, phrase, draft, all three), each a fresh fleet serving the speculation plan
# (one prompt per family, one request at a time, a first and then a repeated pass) with role 0's
# frame and reply records, the phrase table alone at several depths of proposals in flight, and
# speculation off again at the end (the drift over the session); then the tables (Table 3,
# on/off, the first-order model, depth) and the figure.
# With MODEL=FILE.gguf (and MTP_HEAD=DIR, a head fitted to it by scripts/draft.sh) the fleet serves
# that checkpoint (its own cut into roles) over workloads/plans/speculation-real.toml, and the
# proposer sets are suffix, phrase, mtp (the draft head drafting live in the last role; mtp-every
# without its probability floor), draft (the
# checkpoint itself as its own draft model on role 0: no smaller model with its vocabulary is
# installable here, so this is the ceiling of acceptance at the cost of a whole model) and all
# (suffix, phrase, mtp); no depth sweep; then llama-server on the same file with the same plan:
# speculation off, prompt-lookup (ngram-simple) and the same self-draft, into OUT/llama/.
# Only role 0's records are kept (gzipped, in records/): the other roles' are not used; each
# configuration's /api/profile (every role's counters, the draft head's time) is kept as profile.json.
# Usage: [MODEL=FILE.gguf [MTP_HEAD=DIR]] scripts/speculation.sh OUT_DIR BIN_DIR PLAN
set -euo pipefail
out=${1:?out dir}; bin=${2:?bin dir}; plan=${3:?plan}
preset=${PRESET:-inkling-mini}; roles=${ROLES:-11}
if [ -n "${MODEL:-}" ]; then
  serve=(--model "$MODEL")
  splan=workloads/plans/speculation-real.toml
  [ "$plan" = quick ] && splan=workloads/plans/speculation-real-quick.toml
else
  serve=(--preset "$preset" --roles "$roles")
  splan=workloads/plans/speculation.toml
  [ "$plan" = quick ] && splan=workloads/plans/speculation-quick.toml
fi
mkdir -p "$out"
source "$(dirname "$0")/fleet.sh"
source "$(dirname "$0")/llama_server.sh"
stop_all() { fleet_stop; llama_stop; }
trap stop_all EXIT
run_config() {
  local name=$1; shift
  mkdir -p "$out/$name"
  fleet_start "$out/$name/fleet.log" "$bin/moefleet" "${serve[@]}" \
    --profile-dir "$out/$name/profiles" "$@"
  echo "speculation: $name ready at $FLEET_URL" >&2
  "$bin/moefleet-harness" sweep --url "$FLEET_URL" --plan "$splan" --out "$out/$name"
  curl -sf "$FLEET_URL/api/profile" >"$out/$name/profile.json"
  fleet_stop
  # role 0's records are kept (gzipped, in records/); the other roles' are not used
  mkdir -p "$out/$name/records"
  gzip -c "$out/$name/profiles/role-0.jsonl" >"$out/$name/records/role-0.jsonl.gz"
  gzip -c "$out/$name/profiles/role-0-replies.jsonl" >"$out/$name/records/role-0-replies.jsonl.gz"
  rm -rf "$out/$name/profiles"
}
run_config off
run_config suffix --speculate --proposers suffix
run_config phrase --speculate --proposers phrase
if [ -n "${MODEL:-}" ]; then
  # the head's first three modules, over the replay's restricted vocabulary (the paper's share)
  mtp=(--mtp-head "${MTP_HEAD:?MTP_HEAD: a draft head fitted to MODEL}" --mtp-drafts 3 --mtp-rows 16101)
  run_config mtp --speculate --proposers mtp "${mtp[@]}"
  # every draft the head makes, however unsure (--mtp-p-min 0; mtp above sends those of p >= 0.5)
  run_config mtp-every --speculate --proposers mtp "${mtp[@]}" --mtp-p-min 0
  run_config draft --speculate --proposers draft --draft-model "$MODEL"
  run_config all --speculate --proposers suffix,phrase,mtp "${mtp[@]}"
else
  run_config draft --speculate --proposers draft
  run_config all --speculate --proposers suffix,phrase,draft
  # how many proposals in flight: the phrase table alone at several depths
  depths="2 4 8 16 24 32 48 64"
  [ "$plan" = quick ] && depths="2 6"
  for d in $depths; do
    run_config "depth/depth-$d" --speculate --proposers phrase --spec-depth "$d"
  done
fi
# speculation off once more: how far the machine drifted over the session
run_config off-again
if [ -n "${MODEL:-}" ]; then
  # llama.cpp on the same file, one slot, two threads, as its users run it for one stream
  llama=$("$(dirname "$0")/peer_build.sh")
  run_llama() {
    local name=$1; shift
    mkdir -p "$out/llama/$name"
    llama_start "$llama" "$out/llama/$name/server.log" -m "$MODEL" -t 2 -np 1 -c 4096 "$@"
    echo "speculation: llama-server $name ($*) at $LLAMA_URL" >&2
    "$bin/moefleet-harness" sweep --url "$LLAMA_URL" --plan "$splan" --out "$out/llama/$name"
    llama_stop
    gzip -f "$out/llama/$name/server.log"
  }
  run_llama off
  run_llama ngram --spec-type ngram-simple
  run_llama draft --spec-type draft-simple --model-draft "$MODEL"
  run_llama off-again
fi
trap - EXIT
"$bin/moefleet-harness" speculation "$out"
