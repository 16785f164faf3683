# Two commands on a fresh machine:   make demo   |   make test
# Both create ./.venv (Python >= 3.10) on first use and install the project into it.
PYTHON ?= python3
VENV ?= .venv
# PyTorch is installed first so that a CPU build can be chosen; override e.g. TORCH_SPEC="torch>=2.2".
TORCH_SPEC ?= torch==2.13.0
MOGP_DATA ?= $(abspath ../shared/data)
export MOGP_DATA

BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test docs install clean

$(STAMP): pyproject.toml setup.cfg
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)" || $(BIN)/python -m pip install --quiet "torch>=2.2"
	$(BIN)/python -m pip install --quiet -e ".[test,plot]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/mogp-surprise demo

test: $(STAMP)
	$(BIN)/python -m pytest

docs: $(STAMP)
	$(BIN)/python -m sphinx -W -b html docs docs/_build/html

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
