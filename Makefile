# carbonspan — every target builds its own virtual environment from pyproject.toml.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv install test demo bench lint schema clean

$(STAMP): pyproject.toml setup.py agent/otlp/_wire.c agent/otlp/_jsonwalk.c agent/otlp/_jsonlex.h agent/otlp/_batch.h agent/_score.c aggregator/_fold.c
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "carbonspan needs Python >= 3.11"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# `carbonspan` on PATH: the editable install in .venv, then activate it (or `pipx install .`).
install: $(STAMP)
	@echo "installed: $(VENV)/bin/carbonspan ($$($(VENV)/bin/carbonspan --version))"
	@echo "put it on PATH with:  source $(VENV)/bin/activate"

test: $(STAMP)
	$(VENV)/bin/pytest -q

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
