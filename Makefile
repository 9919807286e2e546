# Two commands on a fresh clone: `make demo` and `make test`.
# Both create .venv in the repo root and install the pinned dependencies first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean gpu-check

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip==25.3
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/loadgen run scenarios/server.toml --sut builtin:digits --out runs/demo --set preset=dev

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,bench]'
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

gpu-check:  # on a GPU host, with a CUDA build of torch (PYTHON=..., default python3)
	bash scripts/gpu_checks.sh

clean:
	rm -rf $(VENV) runs build *.egg-info
