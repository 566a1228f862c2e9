# Two commands do all set-up: `make demo` runs the main job, `make test` the test suite.
# Each creates .venv with pip if it is missing.
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test check bench lint clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/remat demo

# Two tiers of tests, each in one worker per core (pytest-xdist: each worker is its own process,
# so memory measurements are not shared between tests), one test file per worker (`loadfile`: a
# module's tests share what its fixtures measured, which a second worker would measure again).
# `make test`: every feature's correctness, in minutes. `make check`: the measured claims (memory
# by resident memory, planner sweeps, 8 devices and two processes, the bench through every
# framework, the long fuzz profile); it installs PyTorch, the benchmarks' comparison, and so also
# runs the tests that need it (marked `torch`). Nothing is skipped in either tier.
# Each prints its 15 slowest tests, so that growth is seen when it happens.
PYTEST := $(PY) -m pytest -n auto --dist loadfile --durations=15

test: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(PYTEST) -m "not claims and not torch"

$(VENV)/.installed-check: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[test,bench]'
	touch $@

check: $(VENV)/.installed-check
	$(PYTEST) -m "claims or torch"

bench: $(VENV)/.installed
	$(VENV)/bin/remat bench

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests benchmarks examples

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info

# The long differential run (issue 10): random programs against JAX; FUZZ_ARGS="--count N --start S".
.PHONY: fuzz
fuzz: $(VENV)/.installed
	$(PY) tests/fuzz_programs.py $(FUZZ_ARGS)
