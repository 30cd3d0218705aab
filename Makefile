# Two commands on a fresh machine:
#   make run   — set up .venv and serve live captions on the bundled model (http://127.0.0.1:8765/)
#   make test  — set up .venv (with test extras) and run the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8765

.PHONY: run test setup setup-test lint

$(BIN)/python:
	$(PY) -m venv $(VENV)

setup: $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e .

setup-test: $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q -e examples/simulmt-policy-example

run: setup
	$(BIN)/simulmt serve --host $(HOST) --port $(PORT)

test: setup-test
	$(BIN)/python -m pytest

lint: setup-test
	$(BIN)/ruff check simulmt policies server eval tests bench
	$(BIN)/mypy simulmt policies server eval
