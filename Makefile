# infercept: the two set-up commands are `make run` and `make test`; everything else they need
# (Debian packages, the default model) is installed here, so a fresh machine needs nothing more.

BUILD ?= build
WERROR ?= OFF
JOBS ?= $(shell nproc)
MODEL_DIR := models
MODEL := $(MODEL_DIR)/SmolLM2-135M-Instruct.Q4_1.gguf
BIN := $(BUILD)/infercept
DEB_PACKAGES := cmake g++ make python3 python3-pip python3-venv nlohmann-json3-dev libgtest-dev unzip \
                libcpp-httplib-dev libboost-dev pkg-config chromium python3-httpx python3-matplotlib
PORT ?= 8000
SERVED_MODEL := $(notdir $(basename $(MODEL)))
VENV := $(BUILD)/venv

.PHONY: all deps pyenv model build run test format format-check bench fuzz clean

all: build

deps: $(BUILD)/.deps-ok
$(BUILD)/.deps-ok:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$missing; \
	fi
	@mkdir -p $(BUILD) && touch $@

# chromium: the dashboard's test runs the page in headless Chromium.
# python3-httpx, python3-matplotlib: bench/loadgen.py and bench/report.py (docs/BENCHMARKS.md) and their test.
# The official `openai` Python client, for the server's end-to-end test (tests/
# server_openai_client.py), in a venv inside the build folder. Without network the test
# is skipped, nothing else fails.
pyenv: $(VENV)/.ok
$(VENV)/.ok: | deps
	@python3 -m venv $(VENV) && $(VENV)/bin/pip install -q openai && touch $@ || \
	  echo "warning: could not install the openai package; its server test will be skipped"

model: $(MODEL)
$(MODEL):
	@bash scripts/fetch_model.sh $(MODEL_DIR)

build: deps pyenv
	cmake -S . -B $(BUILD) -DINFERCEPT_WERROR=$(WERROR) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# Starts the OpenAI-compatible server on the default model (Ctrl-C stops it).
run: build model
	@echo "Starting the OpenAI-compatible server on http://127.0.0.1:$(PORT) (Ctrl-C stops it)."
	@echo "From another terminal:"
	@echo ""
	@echo "  curl http://127.0.0.1:$(PORT)/v1/chat/completions -H 'Content-Type: application/json' \\"
	@echo "    -d '{\"model\": \"$(SERVED_MODEL)\", \"messages\": [{\"role\": \"user\", \"content\": \"What is a KV cache?\"}], \"max_tokens\": 64}'"
	@echo ""
	@echo "Dashboard: http://127.0.0.1:$(PORT)/dashboard   Metrics: http://127.0.0.1:$(PORT)/metrics"
	@echo ""
	$(BIN) serve --port $(PORT)

test: build model
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -LE gpu

# The GPU tests (label `gpu`: CUDA ops against the CPU backend, the model, interception on
# CUDA) on a machine with an NVIDIA GPU; they use a tiny random checkpoint made here.
test-gpu: build model
	$(BIN) make-model --shape tiny --out $(BUILD)/tiny-model
	INFERCEPT_GPU_TEST_MODEL=$(CURDIR)/$(BUILD)/tiny-model ctest --test-dir $(BUILD) --output-on-failure -L gpu

FORMAT_FILES = $(shell git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
format:
	clang-format -i $(FORMAT_FILES)
format-check:
	clang-format --dry-run --Werror $(FORMAT_FILES)

bench: build model
	bash bench/cpu_bench.sh

# libFuzzer over both file parsers, 60 s each, in a separate clang build (needs clang and
# libclang-rt-14-dev: installed here if missing).
fuzz: deps
	@dpkg -s clang-14 libclang-rt-14-dev >/dev/null 2>&1 || apt-get install -y -q clang-14 libclang-rt-14-dev
	cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++-14 -DINFERCEPT_TESTS=OFF >/dev/null
	cmake --build build-fuzz -j $(JOBS) --target fuzz_gguf fuzz_safetensors
	mkdir -p build-fuzz/corpus-gguf build-fuzz/corpus-st
	build-fuzz/fuzz/fuzz_gguf -max_total_time=60 build-fuzz/corpus-gguf fuzz/corpus
	build-fuzz/fuzz/fuzz_safetensors -max_total_time=60 build-fuzz/corpus-st fuzz/corpus

clean:
	rm -rf $(BUILD)
