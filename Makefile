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

# The suite in two parts, both run whatever the first gave, either failing the target:
# 1. every test not marked `serial` on TEST_WORKERS pytest-xdist workers: 2, one per core of
#    CI's 2-core machine (fixed, not -n auto: a big machine's one worker per core would crowd
#    the functional tests' servers and time bounds); each test file whole on one worker
#    (--dist loadfile), so its module fixtures and servers start once;
# 2. the `serial` ones (timing-sensitive: they skip when the host is busy) alone, on a host
#    the rest no longer loads, collected from the files that say `pytest.mark.serial` only
#    (collecting every file takes ~25 s). Exit 5 there (no test marked) is not a failure.
# `python -m pytest` alone still runs everything, in one process.
TEST_WORKERS ?= 2

test: lint
	status=0; \
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not serial" --durations=15 \
	  || status=$$?; \
	$(PY) -m pytest -m serial --durations=15 $$(grep -rl --include='*.py' pytest.mark.serial tests) \
	  || { rc=$$?; [ $$rc -eq 5 ] || status=$$rc; }; \
	exit $$status

bench: $(STAMP)
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,bench]'
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

gpu-check:  # on a GPU host, with a CUDA build of torch (PYTHON=..., default python3)
	bash scripts/gpu_checks.sh

clean:
	rm -rf $(VENV) runs build *.egg-info
