# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates .venv when it is missing and installs what it needs into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export JAX_PLATFORMS ?= cpu

.PHONY: test demo lint bench clean

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
	$(VENV)/bin/ruff check flaxen tests benchmarks examples

test: lint
	$(PY) -m pytest -n 2 -q tests; rc=$$?; [ $$rc -eq 5 ] && rc=0; exit $$rc

demo: $(VENV)/.examples-installed
	$(PY) examples/digits_cnn.py

bench: $(VENV)/.dev-installed
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) build *.egg-info
