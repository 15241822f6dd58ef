# moefleet: the front door. `make reproduce` runs the main job, `make test` the tests.
# CARGO_TARGET_DIR is honoured (CI points it at ~/.cache to reuse compiled dependencies).

CARGO ?= cargo
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
BIN := $(TARGET_DIR)/release
RUN ?= results/single_process
PRESET ?= inkling-mini
PROMPT ?= The river runs past the old mill and the
TOKENS ?= 128

.PHONY: all build reproduce test lint fmt tokenizer demo clean help

all: build

help:
	@echo "make reproduce  - build and run the main job (for now: single-process $(PRESET) generation + record)"
	@echo "make test       - install what tests need, run every test"
	@echo "make lint       - cargo fmt --check and clippy -D warnings"
	@echo "make tokenizer  - retrain workloads/tokenizer.json from workloads/corpus"

build:
	@scripts/require.sh rust
	$(CARGO) build --release --workspace

# Until the pipeline and harness land, the main job is the single-process demo on the default model:
# it generates $(TOKENS) tokens with all 66 layers and writes the measured rates to a record.
reproduce: build
	mkdir -p $(RUN)
	$(BIN)/moefleet inspect $(PRESET) | tee $(RUN)/inspect-$(PRESET).txt
	$(BIN)/moefleet inspect inkling > $(RUN)/inspect-inkling.txt
	$(BIN)/moefleet generate --preset $(PRESET) --prompt "$(PROMPT)" --max-tokens $(TOKENS) --record $(RUN)/generate-$(PRESET).json

demo: reproduce

test:
	@scripts/require.sh rust
	@scripts/require.sh python
	$(CARGO) test --release --workspace

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
