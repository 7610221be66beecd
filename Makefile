# One command to set up and run the quick suite (`make run`), one to set up and run the tests (`make test`).
# TORCH selects the PyTorch build installed when the venv has none: the CPU wheel by default; on a GPU box
# use e.g. TORCH="torch --index-url https://download.pytorch.org/whl/rocm6.2" or keep a system torch with
# VENV_FLAGS=--system-site-packages.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
VENV_FLAGS ?=
EXTRAS ?= models,test

.PHONY: setup run test lint clean

$(VENV)/.installed: pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -c "import torch" 2>/dev/null || $(VENV)/bin/python -m pip install -q $(TORCH)
	$(VENV)/bin/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

setup: $(VENV)/.installed

run: setup
	$(VENV)/bin/gapbench run

test: setup
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/python -m pytest tests

lint: setup
	$(VENV)/bin/ruff check src tests

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
