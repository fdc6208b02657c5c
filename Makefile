# Two commands for a fresh clone: `make demo` and `make test`. Everything else is optional.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
REAL   := .venv-real

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
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/sampling.py

# torch's CPU wheel: on this kind of machine pip takes it from a local file (see README).
$(REAL)/.stamp: pyproject.toml
	$(PYTHON) -m venv $(REAL)
	$(REAL)/bin/python -m pip install --quiet --upgrade pip
	$(REAL)/bin/python -m pip install --quiet -e '.[dev]' 'torch==2.13.0' numpy threadpoolctl
	touch $@

test-real: $(REAL)/.stamp
	$(REAL)/bin/pytest -q -m real -p no:cacheprovider tests/real

clean:
	rm -rf $(VENV) $(REAL) build *.egg-info
