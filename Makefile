# LakeVilla for Jupyter: every target installs what it needs (fresh Debian machine, as root).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMPS := build/stamps
PYTEST := $(PY) -m pytest
# The tiers with a JVM (Spark Connect, and the kernels and browser pages that use it) run in order in one
# pytest process; the others on two pytest-xdist workers: their tests wait on stores, servers and client
# processes more than they compute (on this 2-core machine: 18 minutes in one process, 11 on two workers).
JVM := spark or browser or notebook
UNIT := not (s3 or $(JVM) or slow)

.PHONY: help install sysdeps lint test test-fast test-all demo lab bench clean

help:
	@echo "make demo       run the quickstart notebook headless (build/)"
	@echo "make test       all test tiers this machine can run (not 'slow')"
	@echo "make test-fast  unit tests only (no JVM, no servers)"
	@echo "make lint       ruff and mypy (part of make test)"
	@echo "make test-all   everything, including the slow tier"
	@echo "make lab        JupyterLab on notebooks/"
	@echo "make bench      benchmarks -> benchmarks/results, benchmarks/RESULTS.md"

$(STAMPS):
	@mkdir -p $(STAMPS)

# --- system packages: Java 17+, Graphviz, Chromium (browser tier) -------------------------
$(STAMPS)/sysdeps: scripts/sysdeps.sh | $(STAMPS)
	@bash scripts/sysdeps.sh
	@touch $@

sysdeps: $(STAMPS)/sysdeps

# --- Python venv with the package in editable mode ---------------------------------------
$(STAMPS)/venv: pyproject.toml | $(STAMPS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $@

# --- the prebuilt JupyterLab extension: SQL highlighting of %%lvtxn / %%lvsql cells (labextension/) --
# Editable installs skip setuptools' data-files (a wheel installs them): link the committed build
# where JupyterLab looks (`jupyter labextension list` shows it). No Node.js needed.
LABEXT := lakevilla-jupyterlab-sql

$(STAMPS)/labext: $(STAMPS)/venv
	@mkdir -p $(VENV)/share/jupyter/labextensions
	@rm -rf $(VENV)/share/jupyter/labextensions/$(LABEXT)
	ln -s $(CURDIR)/lv_magic/labextensions/$(LABEXT) $(VENV)/share/jupyter/labextensions/$(LABEXT)
	@touch $@

install: $(STAMPS)/venv $(STAMPS)/labext $(STAMPS)/sysdeps

test-fast: $(STAMPS)/venv
	$(PYTEST) -m "$(UNIT)" -q -n 2

lint: $(STAMPS)/venv
	$(VENV)/bin/ruff check lv_core lv_magic widgets tests benchmarks scripts
	$(VENV)/bin/mypy

test: install lint
	$(PYTEST) -m "not ($(JVM) or slow)" -q -n 2
	$(PYTEST) -m "($(JVM)) and not slow" -q

test-all: install
	$(PYTEST) -q

demo: install
	@if [ -f scripts/demo.py ]; then $(PY) scripts/demo.py; else echo "make demo: not yet (the demo notebook lands with issue 10)"; fi

lab: install
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks

bench: install
	@if [ -f benchmarks/run.py ]; then $(PY) benchmarks/run.py; else echo "make bench: not yet"; fi

clean:
	rm -rf build $(VENV) .pytest_cache
