# `make demo` and `make test` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PATCHKIT := $(VENV)/bin/patchkit
DEMO_VERSION ?= 0.16.0
DEMO_DIR ?= .cache/demo/vllm-$(DEMO_VERSION)
PYTEST_ARGS ?=
# pytest-xdist: WORKERS processes (the tests wait on subprocesses, Ray and the network as much as they
# compute, so more than the cores); --dist loadgroup keeps the tests that share a module's set-up on one
# (tests/xdist_groups.py). WORKERS=0 runs them in this process.
WORKERS ?= 4
XDIST := -n $(WORKERS) --dist loadgroup
# Where PYTHONDONTWRITEBYTECODE is set (this machine), each pytest worker and each `python -m patchkit` the
# tests start would compile patchkit and the tests' helpers from source (~80 ms a command, 3 s a worker):
# compile them once, as pip does an installed package. Up-to-date files are skipped; a stale one is never read.
COMPILE := $(PY) -m compileall -q patchkit tests
# pytest also rewrites the asserts of the plugins packages declare (hypothesis, xdist, platformdirs: ~90 modules,
# ~0.9 s of CPU a process) and, the setting being set, never kept them: every worker of every run did it again.
# Written once for the venv (`pytest --help` loads them); a stale one is rewritten, never read.
REWRITTEN := $(VENV)/.plugins-rewritten
# test-fast's temporary directories (pytest's tmp_path: trees written and fsynced file by file) on tmpfs where
# /dev/shm has 2 GB free: less CPU than on a disk. A passed test's directory is removed at its end (~1 GB a run
# kept in memory otherwise). Not for the release tier, which writes GBs there (real wheels).
# Each run its own --basetemp there (pytest keeps 3 numbered directories a user under one root: runs side by
# side removed each other's), as long a name as pytest-of-root/pytest-12 (tests fit paths in 80 columns and in
# capped messages); removed once the run passed, a failed run's named.
TMPFS = $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && df -Pk /dev/shm | awk 'NR == 2 && $$4 > 2097152 { print "/dev/shm" }')
FAST_ROOT = $${PYTEST_DEBUG_TEMPROOT:-$(or $(TMPFS),$${TMPDIR:-/tmp})}
FAST_KEEP = -o tmp_path_retention_policy=failed
# test-fast tries each property test on a quarter of the examples make test tries (tests/helpers.py: examples),
# and each crash or kill sweep on a quarter of its steps (sweep_trials): make test tries every one.
FAST_PROFILE := --hypothesis-profile=fast

.PHONY: demo test test-fast test-release bench clean lint

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,lint]'
	touch $@

$(REWRITTEN): $(VENV)/.installed
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest --help > /dev/null
	touch $@

# The main job on a real stock release read from the package index:
# fetch -> status -> apply --dry-run -> apply -> verify -> revert, then prove revert is byte-identical.
demo: $(VENV)/.installed
	rm -rf $(DEMO_DIR) $(DEMO_DIR).stock
	$(PATCHKIT) fetch $(DEMO_VERSION) --dest $(DEMO_DIR)
	$(PATCHKIT) status --target $(DEMO_DIR)
	$(PATCHKIT) apply --dry-run --target $(DEMO_DIR)
	$(PATCHKIT) apply --target $(DEMO_DIR)
	$(PATCHKIT) status --target $(DEMO_DIR)
	$(PATCHKIT) verify --target $(DEMO_DIR)
	$(PATCHKIT) revert --target $(DEMO_DIR)
	$(PATCHKIT) fetch $(DEMO_VERSION) --dest $(DEMO_DIR).stock
	diff -r --exclude=.patchkit $(DEMO_DIR).stock $(DEMO_DIR)
	@echo "demo: vllm $(DEMO_VERSION) patched, verified and reverted byte-for-byte"

# Everything, including the tests that read real releases from the package index (marker `release`).
test: $(VENV)/.installed $(REWRITTEN)
	$(COMPILE)
	$(PY) -m pytest -q $(XDIST) $(PYTEST_ARGS)

test-fast: $(VENV)/.installed $(REWRITTEN)
	$(COMPILE)
	@base=$$(mktemp -d "$(FAST_ROOT)/pytest-fast-XXXXXXXXXXXX") || exit 2; \
	$(PY) -m pytest -q $(XDIST) --basetemp="$$base" $(FAST_KEEP) $(FAST_PROFILE) -m "not release and not slow" $(PYTEST_ARGS); \
	code=$$?; if [ $$code = 0 ]; then rm -rf "$$base"; else echo "test-fast: its temporary directories are in $$base"; fi; exit $$code

test-release: $(VENV)/.installed $(REWRITTEN)
	$(COMPILE)
	$(PY) -m pytest -q $(XDIST) -m release $(PYTEST_ARGS)

# ruff (lint and format) and mypy, configured in pyproject.toml; zizmor on the GitHub workflows.
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/zizmor --offline --quiet .github/workflows

bench: $(VENV)/.installed
	$(PY) bench/bench.py

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis

# Opt-in: the real vLLM wheel in its own venv (about 11 GB, 5-12 minutes the first time; reused after;
# VLLM_VENV=DIR builds it, or reuses one, elsewhere).
# apply --python / verify (with the import probe) / revert on an overlay venv laid over it (never
# written to); see tests/vllm_import/. The tool-call sets' behaviour tests run there on vLLM's
# real classes, with the release's own tool-parser tests (from its sdist, fetched into patchkit's cache).
# A venv where vLLM is installed already is used as it is, never written to (VLLM_VENV=/work/vllm-venv-0.33.0
# tests 0.33.0: the tests read the release from the venv, not from VLLM).
VLLM ?= 0.16.0
VLLM_VENV ?= .cache/vllm-venv-$(VLLM)
VLLM_INSTALLED := $(VLLM_VENV)/bin/python -B -c 'from importlib.metadata import version; print(version("vllm"))'

.PHONY: test-vllm vllm-venv

vllm-venv:
	@$(VLLM_INSTALLED) >/dev/null 2>&1 || { $(PYTHON) -m venv $(VLLM_VENV) && \
		$(VLLM_VENV)/bin/python -m pip install --quiet --quiet vllm==$(VLLM); }

test-vllm: $(VENV)/.installed vllm-venv
	VLLM_PYTHON="$(abspath $(VLLM_VENV))/bin/python" VLLM_VERSION=$$($(VLLM_INSTALLED)) \
		$(PY) -m pytest -q tests/vllm_import $(PYTEST_ARGS)
