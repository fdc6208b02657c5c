# Two commands for a fresh clone: `make demo` and `make test`. Everything else is optional.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
REAL   := .venv-real
# Extra package index for torch's CPU wheel, e.g. https://download.pytorch.org/whl/cpu on a
# machine without the local wheel (empty: pip's own configuration decides).
TORCH_INDEX ?=

.PHONY: demo test lint typecheck unit bench test-real clean

# The stamp is rebuilt when the project metadata changes, so a stale venv never hides a new dependency.
$(VENV)/.stamp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(VENV)/.stamp
	$(BIN)/python -m oversub.demo

lint: $(VENV)/.stamp
	$(BIN)/ruff check oversub tests bench examples
	$(BIN)/ruff format --check oversub tests bench examples

typecheck: $(VENV)/.stamp
	$(BIN)/mypy

unit: $(VENV)/.stamp
	$(BIN)/pytest -q

test: lint typecheck unit

bench: $(VENV)/.stamp
	$(BIN)/python bench/run.py

# torch's CPU wheel: on this kind of machine pip takes it from a local file (see README);
# elsewhere: make test-real TORCH_INDEX=https://download.pytorch.org/whl/cpu
$(REAL)/.stamp: pyproject.toml
	$(PYTHON) -m venv $(REAL)
	$(REAL)/bin/python -m pip install --quiet --upgrade pip
	$(REAL)/bin/python -m pip install --quiet $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) \
		-e '.[dev]' 'torch==2.13.0' numpy threadpoolctl
	touch $@

test-real: $(REAL)/.stamp
	$(REAL)/bin/pytest -q -m real -p no:cacheprovider tests/real

clean:
	rm -rf $(VENV) $(REAL) build *.egg-info
