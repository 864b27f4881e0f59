# Every target runs tools from the project's own venv, so a fresh clone needs only python3
# (and Java 17 for Spark): `make test` creates and fills the venv on first use.
VENV ?= .venv
PYTHON := $(VENV)/bin/python
PIP := $(PYTHON) -m pip
# Reinstall only when the declared dependencies change, not on every `make test`.
INSTALL_STAMP := $(VENV)/.acidtables-installed

.PHONY: install test lint demo bench

install: $(INSTALL_STAMP)

$(PYTHON):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(INSTALL_STAMP): pyproject.toml | $(PYTHON)
	$(PIP) install -q -e '.[dev]'
	touch $(INSTALL_STAMP)

test: install
	$(PYTHON) -m pytest -m "not e2e" -q

lint: install
	$(VENV)/bin/ruff check operator tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

demo: install
	$(VENV)/bin/acidtables demo

bench: install
	$(PYTHON) -m bench
