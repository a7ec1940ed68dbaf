# User entry points: `make demo` and `make test`. Both create .venv when it is missing and
# install only when pyproject.toml changed since the last install (stamp files).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torchattacks' metadata pins requests~=2.25.1, which it never imports and which conflicts with
# datasets (requests>=2.32.2); pip cannot resolve both, so it is installed without its
# dependencies (torch, torchvision, scipy, numpy and tqdm already come with the suite).
TORCHATTACKS := torchattacks==3.5.1

.PHONY: demo test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/python -m pip install --quiet --no-deps $(TORCHATTACKS)
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps $(TORCHATTACKS)
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/advsuite demo

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest
