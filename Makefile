# Two commands do all set-up: `make demo` runs the main job, `make test` the test suite.
# Each creates .venv with pip if it is missing.
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-fast bench lint clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/remat demo

# The tests run in one worker per core (pytest-xdist): each worker is its own process, so the
# memory measurements (tracemalloc, RSS of worker subprocesses) are not shared between tests.
# One test file goes to one worker (`loadfile`): a module's tests share what its fixtures and
# caches measured, which a second worker would measure again. (`loadgroup` would group finer,
# but pytest-xdist 3.8's grouping does nothing under pytest 9.2.)
test: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(PY) -m pytest -n auto --dist loadfile

test-fast: $(VENV)/.installed
	$(PY) -m pytest -n auto --dist loadfile -m "not slow"

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
