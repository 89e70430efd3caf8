# Two commands for a newcomer: `make demo` and `make test`. Both set everything up first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The CPU build of torch: a local wheel when pip's find-links offers one, else the CPU index.
TORCH_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# Exact versions of every other dependency, as tested (`make lock` refreshes it). Used where the interpreter's
# major.minor matches the lock's (written in its header); elsewhere pyproject's ranges resolve and a line says so.
LOCK := requirements.lock
LOCK_PYTHON := $(shell sed -n 's/^# python: *//p' $(LOCK) 2>/dev/null)
USE_LOCK ?= 1
# uv installs the locked dependencies (after pip has put torch in place from the local wheel, which uv does not
# see): about 10 s instead of about 65 s for pip's resolver and downloads. USE_UV=0, or uv failing, falls back to pip.
# --compile-bytecode: as pip does, so that no process compiles scipy, sklearn, wandb, ... from source on import
# (where PYTHONDONTWRITEBYTECODE is set, as on CI's machines, every process would: 16 instead of 9 CPU-s to import
# the training stack, measured on the 2-core AMD EPYC).
USE_UV ?= 1

.PHONY: install demo test test-slow test-latest lock chaos claims docs clean gpu-check

install: $(STAMP)

$(STAMP): pyproject.toml $(LOCK)
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
	@# the torch just chosen stays: no dependency (nor test-latest's eager upgrade) may swap it for a CUDA build
	@$(PY) -c 'import torch; print("torch==" + torch.__version__)' > $(VENV)/torch-constraint.txt
	@# the project's distribution was once named `disentangle`: an old editable install would shadow the new one
	@$(PY) -m pip uninstall --quiet --yes disentangle >/dev/null 2>&1 || true
	@if [ "$(USE_LOCK)" = 1 ] && [ "$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "$(LOCK_PYTHON)" ]; \
	then echo "installing the locked versions ($(LOCK))"; \
		if [ "$(USE_UV)" = 1 ] && $(PY) -m pip install --quiet uv 2>/dev/null \
			&& VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/uv pip install --quiet --compile-bytecode -e ".[dev]" -c $(LOCK) -c $(VENV)/torch-constraint.txt; \
		then echo "installed with uv"; \
		else $(PY) -m pip install --quiet -e ".[dev]" -c $(LOCK) -c $(VENV)/torch-constraint.txt; fi; \
	elif [ "$(USE_LOCK)" = 1 ]; then echo "note: $(LOCK) is for Python $(LOCK_PYTHON): resolving pyproject's ranges"; \
		$(PY) -m pip install --quiet -e ".[dev]" -c $(VENV)/torch-constraint.txt; \
	else echo "installing the newest versions pyproject allows"; \
		$(PY) -m pip install --quiet --upgrade --upgrade-strategy eager -e ".[dev]" -c $(VENV)/torch-constraint.txt; fi
	@! $(PY) -m pip list 2>/dev/null | grep -qi '^nvidia-' || [ -n "$$(command -v nvidia-smi)" ] \
		|| (echo "error: CUDA packages were pulled onto a CPU machine" >&2; exit 1)
	touch $(STAMP)

demo: install
	$(PY) -m disentangle.train experiment=quickstart

# The suite in parallel (pytest-xdist): TEST_WORKERS processes (3 on 2 cores measured fastest: docs/install.md,
# "Running the tests"), tests sharing a module's expensive fixture kept on one worker (--dist loadgroup), the 25
# slowest listed at the end. One file: `make test PYTEST_ARGS=tests/test_x.py`.
TEST_WORKERS ?= 3
test: install
	$(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadgroup --durations=25 $(PYTEST_ARGS)

test-slow: install
	$(PY) -m pytest -q -m slow

# The suite on the newest releases pyproject allows (its own venv, .venv-latest), so that dependency drift shows
# here before it reaches users; `make lock` then adopts them once green. torch stays the machine's build.
test-latest:
	rm -f .venv-latest/.installed
	@# the check that the environment is the locked one fails here by design
	$(MAKE) test VENV=.venv-latest USE_LOCK=0 \
		PYTEST_ARGS="--deselect tests/test_lock.py::test_the_environment_is_the_locked_one"
	@echo "newer than $(LOCK) (> newest, < locked):"
	@.venv-latest/bin/python -m pip freeze --exclude-editable | diff $(LOCK) - | grep '^[<>] [A-Za-z]' || true

# Refresh requirements.lock: a fresh venv (.venv-lock) resolves pyproject's ranges (core + dev) to their newest
# releases and `pip freeze` records them, less the project, torch and CUDA packages (installed per machine above).
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet --upgrade pip
	.venv-lock/bin/python -m pip install --quiet "torch==$(TORCH_VERSION)+cpu" 2>/dev/null \
		|| .venv-lock/bin/python -m pip install --quiet torch --index-url $(TORCH_CPU_INDEX)
	.venv-lock/bin/python -m pip install --quiet ".[dev]"
	{ echo "# Exact versions that \`make install\` installs (-c): \`make lock\` writes this file; do not edit by hand."; \
	  echo "# torch is installed first by the Makefile (CPU build $(TORCH_VERSION) on a CPU machine), not from here."; \
	  echo "# python: $$(.venv-lock/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')"; \
	  echo "# platform: $$(.venv-lock/bin/python -c 'import sysconfig; print(sysconfig.get_platform())')"; \
	  .venv-lock/bin/python -m pip freeze --exclude-editable \
		| grep -viE '^(disentangle-quantized|disentangle|torch|triton|nvidia-[a-z0-9-]+)(==| @)'; } > $(LOCK)
	rm -rf .venv-lock
	@echo "wrote $(LOCK) ($$(grep -vc '^#' $(LOCK)) packages)"

# A chaos sweep: 4 short jobs with auto_resume=true, SIGKILLed at random (seeded) times and relaunched until they
# finish; every job's final metrics must equal its uninterrupted twin's. CHAOS_ARGS="--kills 8 --launcher joblib" etc.
chaos: install
	$(PY) -m disentangle.chaos $(CHAOS_ARGS)

# Each paper's headline claims at laptop scale over 5 seeds, with paired intervals and verdicts (docs/claims.md):
# `python -m disentangle.claims --list` gives the estimate; finished runs are reused, so an interrupted `make claims`
# goes on where it stopped. CLAIMS_ARGS="tripod --seeds 0,1,2" etc.
claims: install
	$(PY) -m disentangle.claims --out outputs/claims $(CLAIMS_ARGS)

# One prepared script for a lent GPU (docs/benchmarks.md, "On a GPU"): doctor, compiled/bf16 steps of every paper
# network, runs-per-GPU scaling, then the claims packed on the GPU, within 8 minutes; results in docs/gpu-check.json,
# rendered into docs/benchmarks.md. DEVICE=cpu rehearses it with tiny budgets (outputs/gpu-check/cpu.json).
# GPU_CHECK_PY=python3: use that interpreter as it is, no install (a lent GPU machine with no network, whose python3
# holds CUDA torch; docs/benchmarks.md says which wheels to carry there).
DEVICE ?= auto
gpu-check: $(if $(GPU_CHECK_PY),,install)
	$(or $(GPU_CHECK_PY),$(PY)) -m disentangle.gpu_check --device $(DEVICE) $(GPU_CHECK_ARGS)

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
	rm -rf $(VENV) .venv-latest .venv-lock outputs multirun .pytest_cache site
