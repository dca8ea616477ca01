# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates .venv when it is missing and installs what it needs into it.
# `make test` = ruff (lint, 100 columns) + mypy (types of flaxen/) + pytest on tests/ and the
# docstring examples of flaxen/, with warnings as errors (pyproject.toml lists the ignored ones).
# pytest's exit status is kept as it is: "no tests ran" (5) fails too.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export JAX_PLATFORMS ?= cpu

.PHONY: test demo lint typecheck bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.dev-installed: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[dev,examples]'
	touch $@

$(VENV)/.examples-installed: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[examples]'
	touch $@

lint: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check flaxen tests benchmarks examples conftest.py

typecheck: $(VENV)/.dev-installed
	$(PY) -m mypy

test: lint typecheck
	$(PY) -m pytest -n 2 -q --doctest-modules flaxen tests

demo: $(VENV)/.examples-installed
	$(PY) examples/digits_cnn.py

bench: $(VENV)/.dev-installed
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) build *.egg-info
