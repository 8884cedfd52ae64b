# One command per verb; CI runs `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: demo test lint typecheck bench chaos install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	touch $(BENCH_STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/errands run "Plan a weekend trip to Lisbon for two people on a modest budget"

test: $(STAMP)
	bash tests/run.sh

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench

chaos: $(STAMP)
	$(BIN)/python -m chaos

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy errands workflows activities worker.py chaos bench examples

clean:
	rm -rf $(VENV) .errands .pytest_cache
