# The README's two commands: `make demo` and `make test`. Each builds .venv from nothing when it is missing
# (idempotent, and quick when it is present), installs with constraints.txt, then runs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint bench crash load clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(PY)
	$(PY) -m pip install --quiet --upgrade "pip>=24"
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev,image]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/agent-memory demo

# The suite runs in PYTEST_WORKERS processes (pytest-xdist), a test file to a process: most tests wait on a
# daemon, a child process or the disk, so two workers on two cores take 7.5-9 minutes where one took 13.
# PYTEST_WORKERS=0 runs it in this process. pytest exits 5 when it collected no test: say so instead of failing.
# The tests' stores (tmp_path) live in memory, in /dev/shm, when it has 8 GiB free: the engines fsync their writes,
# which a tmpfs makes free and a disk does not (the whole suite here: 9 min 11 s on disk, 7 min 37 s in memory, the
# same hour). Each passing test's folder is removed as it ends
# (tmp_path_retention_policy), so a run holds only the stores in use (1.5 GB at most in a full run here), and the
# folder goes when the run passes. One folder a checkout (two checkouts' runs at once do not meet). TEST_BASETEMP=
# keeps them on disk, in pytest's usual place.
PYTEST_WORKERS ?= 2
TEST_BASETEMP ?= $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && \
	[ "$$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print $$4}')" -ge 8388608 ] 2>/dev/null && echo /dev/shm/agent-memory-tests-$$(id -u)-$$(echo '$(CURDIR)' | cksum | cut -d ' ' -f 1))
test: $(STAMP)
	@$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(if $(TEST_BASETEMP),--basetemp=$(TEST_BASETEMP)) \
	$(PYTEST_ARGS); code=$$?; \
	if [ -n "$(TEST_BASETEMP)" ]; then \
		if [ $$code -eq 0 ] || [ $$code -eq 5 ]; then rm -rf "$(TEST_BASETEMP)"; \
		else echo "the failing tests' folders are in $(TEST_BASETEMP) (in memory; the next run clears it)"; fi; \
	fi; \
	if [ $$code -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$code

lint: $(STAMP)
	$(VENV)/bin/ruff check agent_memory tests scripts
	$(VENV)/bin/ruff format --check agent_memory tests scripts
	$(VENV)/bin/mypy agent_memory

bench: $(STAMP)
	$(PY) scripts/bench_ingest.py --data ../shared/data/locomo/locomo_dev.json

crash: $(STAMP)
	$(PY) scripts/crash_test.py --cycles 50

load: $(STAMP)
	$(PY) scripts/load_test.py --clients 16 --seconds 60

clean-venv:
	rm -rf $(VENV)
