#!/usr/bin/env bash
# Coverage-guided fuzzing of a decoder of untrusted bytes, libFuzzer through cargo-fuzz on the
# nightly toolchain, and its record: TARGET=wire_decode (default; the wire decoder,
# fuzz/fuzz_targets/wire_decode.rs) or TARGET=gguf_parse (the GGUF reader, gguf_parse.rs).
#
#   [TARGET=...] scripts/fuzz-wire.sh [RUNS] [OUT]
#       (defaults: 12000000, results/fuzz-wire-YYYYMMDD or results/fuzz-gguf-YYYYMMDD)
#
# Installs cargo-fuzz (and the nightly toolchain) if missing, regenerates the committed seeds
# (fuzz/seeds/TARGET, deterministic), runs RUNS inputs in one process from a fresh scratch
# corpus, and writes under OUT: record.json (executions; wall seconds, which include any rebuild
# `cargo fuzz run` does, and libFuzzer's own; coverage, corpus, crashes, engine commit, dirty-tree
# count, load averages, hashes of the fuzzed sources, the command),
# fuzz.log (libFuzzer's output, the first 50 and last 200 lines when longer) and artifacts/ (any
# input that failed, for replay:
# cargo +nightly fuzz run --features libfuzzer TARGET artifacts/<file>).
# MAX_LEN (default 4096) bounds input length; SEED (default 1) is libFuzzer's seed.
set -euo pipefail

cd "$(dirname "$0")/.."
TARGET=${TARGET:-wire_decode}
case $TARGET in
    wire_decode) short=wire; seed_test=(--test wire -- --ignored --exact write_seeds)
        sources=(engine/src/pipeline/wire/{mod,encode,decode}.rs fuzz/src/{wire,source,alloc}.rs) ;;
    gguf_parse) short=gguf; seed_test=(--test gguf -- --ignored --exact fuzzing::write_seeds)
        sources=(engine/src/gguf/{mod,cursor,metadata,parse,tensor,value}.rs fuzz/src/{gguf,source,alloc}.rs) ;;
    *) echo "fuzz: TARGET is wire_decode or gguf_parse, not $TARGET" >&2; exit 2 ;;
esac
RUNS=${1:-12000000}
OUT=${2:-results/fuzz-$short-$(date +%Y%m%d)}
MAX_LEN=${MAX_LEN:-4096}
SEED=${SEED:-1}

if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
fi
if ! command -v cargo-fuzz >/dev/null; then
    cargo install cargo-fuzz --locked
fi

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -rf "$OUT/artifacts"
mkdir -p "$OUT/artifacts"

# the seed set is generated; regenerate it in fuzz/seeds/TARGET (the stable test checks the
# committed copy matches)
cargo test --release -p moefleet-fuzz "${seed_test[@]}"
# the targets' libFuzzer runtime is the fuzz crate's feature `libfuzzer` (off on stable)
cargo +nightly fuzz build --features libfuzzer "$TARGET"

corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
# -malloc_limit_mb: libFuzzer's own check that no single allocation tops 64 MB (independent of
# fuzz_check's tighter one); a new corpus is written to the scratch directory, the seeds are read
args=(-runs="$RUNS" -max_len="$MAX_LEN" -seed="$SEED" -print_final_stats=1
    -malloc_limit_mb=64 -rss_limit_mb=2048 -artifact_prefix="$OUT/artifacts/")
cmd="cargo +nightly fuzz run --features libfuzzer $TARGET <scratch corpus> fuzz/seeds/$TARGET -- ${args[*]}"
cmd=${cmd//$OUT/<OUT>}

load_start=$(cat /proc/loadavg)
t0=$(date +%s.%N)
set +e
cargo +nightly fuzz run --features libfuzzer "$TARGET" "$corpus" fuzz/seeds/$TARGET -- "${args[@]}" \
    >"$OUT/fuzz.full.log" 2>&1
status=$?
set -e
t1=$(date +%s.%N)
load_end=$(cat /proc/loadavg)

log="$OUT/fuzz.full.log"
num() { if [ -n "$1" ]; then echo "$1"; else echo null; fi; }
final_stat() { grep -oP "^stat::$1:\s*\K[0-9.]+" "$log" | tail -1 || true; }
execs=$(final_stat number_of_executed_units)
fuzz_secs=$(grep -oP '^Done [0-9]+ runs in \K[0-9]+' "$log" | tail -1 || true)
last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
cov=$(grep -oP 'cov: \K[0-9]+' <<<"$last" || echo null)
ft=$(grep -oP 'ft: \K[0-9]+' <<<"$last" || echo null)
corp_units=$(grep -oP 'corp: \K[0-9]+' <<<"$last" || echo null)
corpus_files=$(find "$corpus" -type f | wc -l)
corpus_bytes=$(find "$corpus" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
artifacts=$(find "$OUT/artifacts" -type f | wc -l)
crashes=$(grep -cE '^==[0-9]+==.*(ERROR|WARNING): (libFuzzer|AddressSanitizer)|^thread .* panicked' "$log" || true)

lines=$(wc -l <"$log")
if [ "$lines" -gt 250 ]; then
    { head -50 "$log"; echo "... ($((lines - 250)) lines of $lines omitted) ..."; tail -200 "$log"; } >"$OUT/fuzz.log"
else
    cp "$log" "$OUT/fuzz.log"
fi

hashes=$(for f in "${sources[@]}" fuzz/fuzz_targets/$TARGET.rs; do
    printf '"%s": "%s"\n' "$f" "$(sha256sum "$f" | cut -d' ' -f1)"; done | paste -sd, -)

jq -n \
    --arg target "$TARGET" \
    --argjson runs_requested "$RUNS" \
    --argjson executions "$(num "$execs")" \
    --argjson exec_per_sec "$(num "$(final_stat average_exec_per_sec)")" \
    --argjson new_units_added "$(num "$(final_stat new_units_added)")" \
    --argjson peak_rss_mb "$(num "$(final_stat peak_rss_mb)")" \
    --argjson slowest_unit_time_sec "$(num "$(final_stat slowest_unit_time_sec)")" \
    --argjson fuzzer_seconds "$(num "$fuzz_secs")" \
    --argjson wall_seconds "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" \
    --argjson cov "$cov" --argjson ft "$ft" \
    --argjson corpus_units "$corp_units" \
    --argjson corpus_files "$corpus_files" --argjson corpus_bytes "$corpus_bytes" \
    --argjson seed_files "$(find fuzz/seeds/$TARGET -type f | wc -l)" \
    --argjson max_len "$MAX_LEN" --argjson seed "$SEED" \
    --argjson exit_status "$status" \
    --argjson crash_reports "$crashes" --argjson artifacts "$artifacts" \
    --arg engine_commit "$(git rev-parse HEAD)" \
    --argjson dirty_paths "$(git --no-optional-locks status --porcelain | wc -l)" \
    --argjson sources_sha256 "{$hashes}" \
    --arg load_start "$load_start" --arg load_end "$load_end" \
    --arg nproc "$(nproc)" \
    --arg cpu "$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')" \
    --arg cpu_family "$(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')" \
    --arg cpu_model "$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')" \
    --arg rustc "$(rustup run nightly rustc --version)" \
    --arg cargo_fuzz "$(cargo fuzz --version)" \
    --arg date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    --arg command "$cmd" \
    '{target: $target, date: $date, runs_requested: $runs_requested, executions: $executions,
      wall_seconds: $wall_seconds, fuzzer_seconds: $fuzzer_seconds, exec_per_sec: $exec_per_sec,
      coverage: {cov: $cov, ft: $ft}, corpus_units: $corpus_units,
      corpus_files: $corpus_files, corpus_bytes: $corpus_bytes, new_units_added: $new_units_added,
      seed_files: $seed_files, max_len: $max_len, libfuzzer_seed: $seed,
      peak_rss_mb: $peak_rss_mb, slowest_unit_time_sec: $slowest_unit_time_sec,
      exit_status: $exit_status, crash_reports: $crash_reports, artifacts: $artifacts,
      engine_commit: $engine_commit, dirty_paths: $dirty_paths, sources_sha256: $sources_sha256,
      loadavg_start: $load_start, loadavg_end: $load_end, nproc: ($nproc | tonumber),
      host: {cpu: $cpu, cpu_family: ($cpu_family | tonumber), cpu_model: ($cpu_model | tonumber)},
      rustc: $rustc, cargo_fuzz: $cargo_fuzz, command: $command}' >"$OUT/record.json"
rm "$log"

cat "$OUT/record.json"
if [ "$status" -ne 0 ] || [ "$artifacts" -ne 0 ]; then
    echo "fuzz $TARGET: the fuzzer failed (exit $status, $artifacts artifacts under $OUT/artifacts)" >&2
    exit 1
fi
if [ -z "$execs" ] || [ "$execs" -lt "$RUNS" ]; then
    echo "fuzz $TARGET: $execs executions, fewer than the $RUNS asked for" >&2
    exit 1
fi
