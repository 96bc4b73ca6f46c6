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

# pytest exits 5 when it collected no test: say so instead of failing the build on it.
test: $(STAMP)
	@$(PY) -m pytest $(PYTEST_ARGS); code=$$?; \
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
