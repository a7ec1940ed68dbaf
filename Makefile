# User entry points: `make demo` and `make test`. Both create .venv when it is missing and
# install only when pyproject.toml changed since the last install (stamp files).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The extra `baselines` brings torchattacks (pyproject.toml says which release, and why).

.PHONY: demo test docs system-deps

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[baselines]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,baselines]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/advsuite demo

# The documentation site (mkdocs.yml; the attack reference is generated from the registry):
# --strict fails on a broken link or a page missing from the nav. Output in site/ (gitignored).
docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# Debian's wordnet-base and chromium where apt-get runs as root (tests/system_deps.sh); without
# them the tests that need them skip, saying why.
system-deps:
	@bash tests/system_deps.sh

# --prefetch-builtins: the robust built-ins train beside the tests (tests/conftest.py). -n 2: two
# pytest-xdist workers, one torch thread each, a test file per worker at a time (docs/architecture.md).
test: $(VENV)/.installed-dev docs system-deps
	$(BIN)/python -m pytest --prefetch-builtins -n 2 --dist loadfile
