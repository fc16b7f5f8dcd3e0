# carbonspan — every target builds its own virtual environment from pyproject.toml.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv install test demo bench lint schema clean

$(STAMP): pyproject.toml setup.py agent/otlp/_wire.c agent/otlp/_jsonwalk.c agent/otlp/_jsonlex.h agent/otlp/_batch.h agent/_score.c aggregator/fold/_fold.c
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "carbonspan needs Python >= 3.11"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	CARBONSPAN_REQUIRE_C=$(if $(filter 1,$(CARBONSPAN_ALLOW_PYTHON)),0,1) $(PY) -m pip install --quiet -e '.[test]'
	$(PY) -m carbonspan.buildcheck
	touch $(STAMP)

venv: $(STAMP)

# `carbonspan` on PATH: the editable install in .venv, then activate it (or `pipx install .`).
install: $(STAMP)
	@echo "installed: $(VENV)/bin/carbonspan ($$($(VENV)/bin/carbonspan --version))"
	@echo "put it on PATH with:  source $(VENV)/bin/activate"

# The suite runs on every core this process may use (pytest-xdist; nproc honours CPU affinity,
# so a 1-core machine gets one worker), whole test files per worker (--dist loadfile; the hook
# in tests/conftest.py keeps tests/signing and tests/deploy whole) so a module- or
# session-scoped agent process or Dask cluster starts once. `make test TEST_JOBS=1` for one
# worker; PYTEST_ARGS picks tests, e.g. PYTEST_ARGS=tests/daemon. pytest's exit 5 ("collected
# no tests") becomes a failure that says so.
TEST_JOBS   ?= $(shell nproc 2>/dev/null || echo 1)
PYTEST_ARGS ?=

test: $(STAMP)
	@rc=0; $(VENV)/bin/pytest -q -n $(TEST_JOBS) --dist loadfile $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests (exit 5): failing" >&2; exit 1; fi; \
	exit $$rc

demo: $(STAMP)
	$(VENV)/bin/carbonspan demo

bench: $(STAMP)
	$(PY) -m bench

lint: $(STAMP)
	$(VENV)/bin/ruff check .

schema: $(STAMP)
	$(PY) -m schema.generate

clean:
	rm -rf $(VENV) build *.egg-info
