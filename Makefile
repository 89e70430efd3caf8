# Two commands for a newcomer: `make demo` and `make test`. Both set everything up first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The CPU build of torch: a local wheel when pip's find-links offers one, else the CPU index.
TORCH_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: install demo test test-slow chaos docs clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# CUDA torch only where a GPU driver is present; never pull CUDA wheels onto a CPU machine.
	@if $(PY) -c "import torch" 2>/dev/null; then \
		echo "torch already installed: $$($(PY) -c 'import torch; print(torch.__version__)')"; \
	elif command -v nvidia-smi >/dev/null 2>&1; then \
		echo "GPU driver found: installing CUDA torch"; $(PY) -m pip install "torch>=2.3"; \
	else \
		echo "no GPU driver: installing CPU torch"; \
		$(PY) -m pip install "torch==$(TORCH_VERSION)+cpu" 2>/dev/null \
		|| $(PY) -m pip install torch --index-url $(TORCH_CPU_INDEX); \
	fi
	$(PY) -m pip install --quiet -e ".[dev]"
	@! $(PY) -m pip list 2>/dev/null | grep -qi '^nvidia-' || [ -n "$$(command -v nvidia-smi)" ] \
		|| (echo "error: CUDA packages were pulled onto a CPU machine" >&2; exit 1)
	touch $(STAMP)

demo: install
	$(PY) -m disentangle.train experiment=quickstart

test: install
	$(PY) -m pytest -q -m "not slow"

test-slow: install
	$(PY) -m pytest -q -m slow

# A chaos sweep: 4 short jobs with auto_resume=true, SIGKILLed at random (seeded) times and relaunched until they
# finish; every job's final metrics must equal its uninterrupted twin's. CHAOS_ARGS="--kills 8 --launcher joblib" etc.
chaos: install
	$(PY) -m disentangle.chaos $(CHAOS_ARGS)

# The documentation site (mkdocs.yml, docs/): `make docs` builds it into site/, failing on any warning;
# `make docs SERVE=1` serves it with live reload at http://127.0.0.1:8000 instead.
# NO_MKDOCS_2_WARNING silences mkdocs-material's banner about MkDocs 2.0 (not a build warning).
docs: install
ifeq ($(SERVE),1)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve
else
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict
endif

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache site
