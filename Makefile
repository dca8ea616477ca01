# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates .venv when it is missing and installs what it needs into it.
# `make test` = ruff (lint, 100 columns) + mypy (types of flaxen/) + pytest on tests/ and the
# docstring examples of flaxen/, with warnings as errors (pyproject.toml lists the ignored ones).
# pytest also builds the documentation site (tests/docs) and runs every page's code blocks.
# `make docs` builds the site into docs/_build/html (Sphinx, warnings as errors, offline).
# pytest's exit status is kept as it is: "no tests ran" (5) fails too.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export JAX_PLATFORMS ?= cpu

.PHONY: test demo lint typecheck bench docs clean

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
	$(VENV)/bin/ruff check flaxen tests benchmarks examples docs conftest.py

typecheck: $(VENV)/.dev-installed
	$(PY) -m mypy

test: lint typecheck
	$(PY) -m pytest -n 2 -q --doctest-modules flaxen tests

demo: $(VENV)/.examples-installed
	$(PY) examples/digits_cnn.py

docs: $(VENV)/.dev-installed
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html
	@echo "site: docs/_build/html/index.html"

bench: $(VENV)/.dev-installed
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) build *.egg-info docs/_build
