# One command to set up and run the quick suite (`make run`), one to set up and run the tests (`make test`).
# TORCH selects the PyTorch build installed when the venv has none: the CPU wheel by default; on a GPU box
# use e.g. TORCH="torch --index-url https://download.pytorch.org/whl/rocm6.2" or keep a system torch with
# VENV_FLAGS=--system-site-packages.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
VENV_FLAGS ?=
EXTRAS ?= models,test

.PHONY: setup run test lint dist-check device-wheels clean

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
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/python -m pytest -n auto tests

# The wheels a lent accelerator machine without a registry lacks (benchmarks/device_wheels.py), into .whl/.
device-wheels: setup
	$(VENV)/bin/python benchmarks/device_wheels.py download --dest .whl

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks

# The package as a user installs it: an sdist, a wheel built from it, installed into a fresh venv (with the CPU
# torch wheel), and three verbs run from the installed copy (catches package data left out of the wheel).
dist-check: setup
	rm -rf dist .venv-dist
	$(VENV)/bin/python -m pip install -q build
	$(VENV)/bin/python -m build --outdir dist . > /dev/null
	$(PYTHON) -m venv .venv-dist
	.venv-dist/bin/python -m pip install -q --upgrade pip
	.venv-dist/bin/python -m pip install -q $(TORCH)
	.venv-dist/bin/python -m pip install -q dist/gapbench-*.whl
	cd /tmp && $(CURDIR)/.venv-dist/bin/gapbench --version
	cd /tmp && $(CURDIR)/.venv-dist/bin/gapbench specs --no-cpu > /dev/null
	cd /tmp && $(CURDIR)/.venv-dist/bin/gapbench scan $(CURDIR)/tests/fixtures/scan/cpp --format json > /dev/null
	@echo "dist-check: the wheel installs and runs"

clean:
	rm -rf $(VENV) .venv-dist build dist *.egg-info src/*.egg-info
