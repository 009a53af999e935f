# polypath: the two commands a newcomer needs.
#   make demo   build, run the lab's paper reproductions on bundled defaults, print the
#               tables and write report/index.md (+ PNG plots, summary.json)
#   make test   install what the tests need, then run every test
CARGO ?= cargo
PYTHON ?= python3
VENV := lab/.venv
LAB_PY := $(VENV)/bin/python

.PHONY: build demo test lint lab-deps

build:
	$(CARGO) build --release -p polypath

# The lab's Python environment (matplotlib, tomli-w, pytest from PyPI).
$(VENV)/.installed: lab/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e 'lab[test]'
	touch $@

lab-deps: $(VENV)/.installed

demo: build lab-deps
	POLYPATH_BIN=target/release/polypath $(LAB_PY) -m polypath_lab run all --out report

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p polypath-sim --features noq --all-targets -- -D warnings

test: lint lab-deps
	$(CARGO) test --workspace
	$(CARGO) test -p polypath-sim --features noq --test quic
	$(CARGO) build -p polypath
	POLYPATH_BIN=target/debug/polypath $(LAB_PY) -m pytest -q lab/tests
