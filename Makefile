# infercept: the two set-up commands are `make run` and `make test`; everything else they need
# (Debian packages, the default model) is installed here, so a fresh machine needs nothing more.

BUILD ?= build
WERROR ?= OFF
JOBS ?= $(shell nproc)
MODEL_DIR := models
MODEL := $(MODEL_DIR)/SmolLM2-135M-Instruct.Q4_1.gguf
BIN := $(BUILD)/infercept
DEB_PACKAGES := cmake g++ make python3 python3-pip python3-venv nlohmann-json3-dev libgtest-dev unzip \
                libcpp-httplib-dev libboost-dev libcli11-dev pkg-config chromium python3-httpx \
                python3-matplotlib clang-format libbenchmark-dev python3-jsonschema python3-jinja2
PORT ?= 8000
SERVED_MODEL := $(notdir $(basename $(MODEL)))
VENV := $(BUILD)/venv

.PHONY: all deps pyenv model chat-templates build run test test-asan format format-check bench fuzz \
        fuzz-ci fuzz-build clean

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
# The official `openai` Python client and LangChain's OpenAI integration, for the server's
# end-to-end tests (tests/server_openai_client.py, tests/server_agent_clients.py), in a venv
# inside the build folder. Without network the tests are skipped, nothing else fails. The
# stamp names the packages, so a venv made for fewer is completed.
# openai-agents: the constrained-decoding test runs an Agent with tool_choice "required"
# (tests/server_constrained_clients.py); python3-jsonschema (Debian) validates its calls.
# llguidance: tests/test_grammar_llguidance.cpp compares our token masks with its.
# anthropic: tests/server_anthropic_client.py runs Anthropic's SDK against /v1/messages.
PY_PACKAGES := openai langchain-openai openai-agents llguidance anthropic
empty :=
PY_STAMP := $(VENV)/.ok-$(subst $(empty) $(empty),+,$(PY_PACKAGES))
pyenv: $(PY_STAMP)
$(PY_STAMP): | deps
	@python3 -m venv $(VENV) && $(VENV)/bin/pip install -q $(PY_PACKAGES) && touch $@ || \
	  echo "warning: could not install the openai and langchain-openai packages; their server tests will be skipped"

# Real models' chat templates for tests/chat_template_jinja_test.py (python3-jinja2 renders them
# as transformers does; the test compares infercept's interpreter with it): llama.cpp's
# models/templates/*.jinja, taken from the llama-cpp-python source distribution on PyPI
# (pinned), into build/chat-templates. Without network the test is skipped, nothing else fails.
CHAT_TEMPLATES := $(BUILD)/chat-templates
CHAT_TEMPLATES_SDIST := llama-cpp-python==0.3.36
chat-templates: $(CHAT_TEMPLATES)/.ok
$(CHAT_TEMPLATES)/.ok: | deps
	@rm -rf $(BUILD)/.sdist && mkdir -p $(BUILD)/.sdist && \
	if python3 -m pip download -q --no-deps --no-binary :all: $(CHAT_TEMPLATES_SDIST) -d $(BUILD)/.sdist; then \
	  mkdir -p $(CHAT_TEMPLATES) && \
	  tar xzf $(BUILD)/.sdist/*.tar.gz -C $(CHAT_TEMPLATES) --strip-components=5 --wildcards \
	    '*/vendor/llama.cpp/models/templates/*.jinja' && touch $@; \
	else echo "warning: could not fetch $(CHAT_TEMPLATES_SDIST); the chat template test will be skipped"; fi; \
	rm -rf $(BUILD)/.sdist

model: $(MODEL)
$(MODEL):
	@bash scripts/fetch_model.sh $(MODEL_DIR)

build: deps pyenv
	cmake -S . -B $(BUILD) -DINFERCEPT_WERROR=$(WERROR) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# Starts the OpenAI-compatible server on the default model (Ctrl-C stops it). The curl
# example comes last, once the server answers /health, so the build's and the server's
# start-up lines do not bury it; the sub-makes of the build keep quiet about directories.
# Ctrl-C reaches the shell (a background job ignores SIGINT), which stops the server with
# SIGTERM: the same graceful stop.
run: export MAKEFLAGS += --no-print-directory
run: build model
	@$(BIN) serve --port $(PORT) & pid=$$!; \
	trap 'kill -TERM $$pid 2>/dev/null; wait $$pid; exit 0' INT TERM; \
	until python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$(PORT)/health', timeout=1)" \
	    2>/dev/null; do \
	  kill -0 $$pid 2>/dev/null || { wait $$pid; exit $$?; }; sleep 0.3; \
	done; \
	echo ""; \
	echo "Serving on http://127.0.0.1:$(PORT) (Ctrl-C stops it). From another terminal:"; \
	echo ""; \
	echo "  curl http://127.0.0.1:$(PORT)/v1/chat/completions -H 'Content-Type: application/json' \\"; \
	echo "    -d '{\"model\": \"$(SERVED_MODEL)\", \"messages\": [{\"role\": \"user\", \"content\": \"What is a KV cache?\"}], \"max_tokens\": 64}'"; \
	echo ""; \
	echo "Dashboard: http://127.0.0.1:$(PORT)/dashboard   Metrics: http://127.0.0.1:$(PORT)/metrics"; \
	echo ""; \
	wait $$pid

test: build model chat-templates
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -LE gpu

# The GPU tests (label `gpu`: CUDA ops against the CPU backend, the model, interception on
# CUDA) on a machine with an NVIDIA GPU; they use a tiny random checkpoint made here.
test-gpu: build model
	$(BIN) make-model --shape tiny --out $(BUILD)/tiny-model
	INFERCEPT_GPU_TEST_MODEL=$(CURDIR)/$(BUILD)/tiny-model ctest --test-dir $(BUILD) --output-on-failure -L gpu

FORMAT_FILES = $(shell git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
format:
	clang-format -i $(FORMAT_FILES)
format-check: deps
	clang-format --dry-run --Werror $(FORMAT_FILES)

bench: build model
	bash bench/cpu_bench.sh

# The whole suite (-LE gpu) under AddressSanitizer + UndefinedBehaviorSanitizer, CPU backend,
# in build-asan (docs/DESIGN.md, "Sanitizers and fuzzing"). Every report goes to a file in
# build-asan/sanitizer-logs, so a finding fails the run even when it comes from a process a
# test does not check the exit of (`infercept serve` under the Python tests); the reports
# are printed at the end. Leaks count (LeakSanitizer): tests/lsan.supp lists what is not ours.
ASAN_BUILD := build-asan
SANITIZER_LOGS := $(ASAN_BUILD)/sanitizer-logs
SANITIZER_ENV := \
  ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:detect_leaks=1:print_stacktrace=1:strict_init_order=1:log_path=$(CURDIR)/$(SANITIZER_LOGS)/asan \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$(CURDIR)/$(SANITIZER_LOGS)/ubsan \
  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0
test-asan: deps model
	@$(MAKE) --no-print-directory pyenv chat-templates BUILD=$(ASAN_BUILD)
	cmake -S . -B $(ASAN_BUILD) -DINFERCEPT_CUDA=OFF -DINFERCEPT_SANITIZE=ON -DINFERCEPT_FUZZ=OFF >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	@rm -rf $(SANITIZER_LOGS) && mkdir -p $(SANITIZER_LOGS)
	@rc=0; $(SANITIZER_ENV) ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) -LE gpu || rc=$$?; \
	if [ -n "$$(ls -A $(SANITIZER_LOGS))" ]; then \
	  for f in $(SANITIZER_LOGS)/*; do echo "==== $$f"; cat "$$f"; done; \
	  echo "test-asan: sanitizer findings above"; exit 1; \
	fi; exit $$rc

# libFuzzer in a separate clang build (build-fuzz, ASan + UBSan): the file parsers (GGUF,
# safetensors), the OpenAI request parser, the chat templates, the Jinja interpreter and the
# tokenizer, each FUZZ_SECONDS from its seeds in fuzz/corpus (fuzz/run.sh; a crash, a sanitizer report or
# a leak fails it, the input is left in build-fuzz/artifacts). `make fuzz` is the long run,
# `make fuzz-ci` the short one of .ci/run. Needs clang-14 and libclang-rt-14-dev: installed
# here if missing.
FUZZ_SECONDS ?= 300
FUZZ_CI_SECONDS ?= 45
FUZZ_BUILD := build-fuzz
FUZZ_TARGETS := fuzz_gguf fuzz_safetensors fuzz_openai_request fuzz_chat_template fuzz_tokenizer \
                fuzz_jinja
fuzz-build: deps model
	@dpkg -s clang-14 libclang-rt-14-dev >/dev/null 2>&1 || { \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q clang-14 libclang-rt-14-dev; }
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_CXX_COMPILER=clang++-14 -DINFERCEPT_TESTS=OFF -DINFERCEPT_CUDA=OFF \
	  -DINFERCEPT_SANITIZE=ON >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(FUZZ_TARGETS)
fuzz: fuzz-build
	bash fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)
fuzz-ci: fuzz-build
	bash fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_CI_SECONDS) $(FUZZ_TARGETS)

clean:
	rm -rf $(BUILD)
