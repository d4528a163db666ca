# One command to run, one to test. Everything is installed into .venv from
# constraints.txt on first use (TFX 1.16 needs Python 3.10).
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
# Python 3.10: from PYTHON310=..., pyenv, or PATH.
PYTHON310 ?= $(shell for p in $$(pyenv root 2>/dev/null)/versions/3.10*/bin/python3.10 \
  $$HOME/.pyenv/versions/3.10*/bin/python3.10 $$(command -v python3.10); do \
  if [ -x "$$p" ]; then echo "$$p"; break; fi; done)

RUN_DIR := runs/quickstart
RUN_DATA := runs/data/criteo_train.txt
RUN_ROWS := 100000

.PHONY: help venv run test test-fast clean flink-up flink-down

help:
	@echo "make run        run the whole pipeline on generated Criteo-layout data"
	@echo "make test       run every test (unit and end-to-end)"
	@echo "make test-fast  skip the slow (end-to-end, training) tests"
	@echo "make flink-up   start a local Flink cluster for the Beam components (docs/flink.md)"
	@echo "make flink-down stop it"
	@echo "make clean      remove runs/ (keeps .venv)"

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	@if [ -z "$(PYTHON310)" ]; then \
	  echo "error: Python 3.10 not found (TFX 1.16 needs it). Install it with" \
	       "'pyenv install 3.10' or pass PYTHON310=/path/to/python3.10" >&2; exit 1; fi
	@[ -x $(PY) ] || $(PYTHON310) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=26"
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	@touch $@

$(RUN_DATA): | venv
	$(PY) -m pipeline generate --format criteo --rows $(RUN_ROWS) --seed 0 --out $@

run: venv $(RUN_DATA)
	$(PY) -m pipeline run --dataset criteo --data $(RUN_DATA) --output $(RUN_DIR) --epochs 4

# Test files run in parallel, one worker per core up to 4 (each file on one
# worker, so its module fixtures run once; files sharing a session fixture
# on one worker: tests/conftest.py; a worker holds up to ~3 GB).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 4 ? n : 4 )))
PYTEST := $(PY) -m pytest -ra -n $(TEST_WORKERS) --dist loadfile

test: venv
	$(PYTEST) --durations=25

test-fast: venv
	$(PYTEST) -m "not slow"

# A local Flink cluster (JobManager, TaskManager, Beam job server, SDK worker
# pool); its ports and sizes are environment variables (kubeflow/local_flink.sh).
flink-up: venv
	@kubeflow/local_flink.sh start

flink-down:
	@kubeflow/local_flink.sh stop

clean:
	rm -rf runs
