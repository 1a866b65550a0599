# One entry point for people and CI. Everything installs into .venv from the project's own files.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test sim soak bench clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: magnetar needs Python 3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

setup: $(STAMP)

# Until the broker exists (issue 4), `run` runs the deterministic simulator and prints its report.
run: setup
	$(BIN)/magnetar sim

test: setup
	$(BIN)/python -m pytest tests -q

sim: setup
	$(BIN)/magnetar sim $(if $(SEED),--seed $(SEED),) $(if $(MODE),--mode $(MODE),)

# Long seed sweep: 200,000 schedules per Key_Shared mode (40,000 per other type) across all cores.
soak: setup
	MAGNETAR_SIM_SCHEDULES=200000 $(BIN)/python -m pytest tests/sim/test_sweep.py -q

bench: setup
	$(BIN)/python bench/core_dispatch.py
	$(BIN)/python bench/core_join_leave.py
	$(BIN)/python bench/core_draining_memory.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
