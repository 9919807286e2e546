# Two commands on a fresh clone: `make demo` and `make test`.
# Both create .venv in the repo root and install the pinned dependencies first: the demo
# only what it needs (the package and the `sut` extra: torch CPU, scikit-learn), the
# tests everything (`dev`). VENV=DIR puts the environment elsewhere.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test lint bench clean gpu-check

# One pip call resolves everything once; --no-compile skips byte-compiling every installed
# file (torch and ray hold tens of thousands): Python compiles what a run imports, once.
PIP_INSTALL := $(PY) -m pip install -q --no-compile -c constraints.txt torch==2.13.0

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --no-compile --upgrade pip==25.3
	$(PIP_INSTALL) -e '.[dev]'
	touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml constraints.txt
	@echo "make demo: installing into $(VENV): loadgen and its 'sut' extra (torch==2.13.0 CPU, scikit-learn), no dev tools"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --no-compile --upgrade pip==25.3
	$(PIP_INSTALL) -e '.[sut]'
	touch $(DEMO_STAMP)

# Exit 0 once the run completes, VALID or INVALID (the summary prints the verdict and its
# reasons); 2 or 3 (bad settings, the SUT failed) fail the target.
demo: $(DEMO_STAMP)
	$(VENV)/bin/loadgen run --scenario server --sut builtin:digits --out runs/demo --set preset=dev \
	  || [ $$? -eq 1 ]

# ruff and mypy --strict (pinned in the `dev` extra, configured in pyproject.toml)
lint: $(STAMP)
	$(VENV)/bin/ruff check loadgen sut oipwire tests benchmarks
	$(VENV)/bin/mypy --strict loadgen sut oipwire

test: lint
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,bench]'
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

gpu-check:  # on a GPU host, with a CUDA build of torch (PYTHON=..., default python3)
	bash scripts/gpu_checks.sh

clean:
	rm -rf $(VENV) runs build *.egg-info
