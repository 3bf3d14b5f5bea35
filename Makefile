# One command sets up and runs the embedded default (`make demo`); one sets up and runs every
# check and test (`make test`). Both create .venv from pyproject.toml on first use.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo dev test lint typecheck protos docs docs-update chromium pytest bench fuzz clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: setup
	VENV=$(VENV) bash scripts/demo.sh

dev: setup
	$(BIN)/truerun dev

test: setup lint typecheck protos docs pytest

lint: setup
	$(BIN)/python scripts/architecture.py
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/hadolint Dockerfile

typecheck: setup
	$(BIN)/mypy

protos: setup
	PYTHON=$(BIN)/python bash scripts/check_protos.sh

# The docs against the code, writing nothing (scripts/docs.py): every relative link in README.md
# and docs/*.md resolves (anchors too), every path README.md cites exists, and what is
# generated from code (the settings table, the long-task tables, gateway/openapi.json) is
# current. docs-update rewrites the generated parts.
docs: setup
	$(BIN)/python scripts/docs.py

docs-update: setup
	$(BIN)/python scripts/docs.py --write

# The browser tests need Debian's chromium; installed here when missing (never by playwright).
chromium:
	bash scripts/ensure_chromium.sh

# Two phases, every test in exactly one (tests/conftest.py marks `serial`): the in-process
# tests on two workers, then the ones that start, kill or time real processes, one at a time
# (sharing two cores with a second test would change what they measure).
pytest: setup chromium
	$(BIN)/pytest -n 2 -m "not serial"
	$(BIN)/pytest -m serial

bench: setup
	$(BIN)/python -m bench.transition --seconds 20

# schemathesis over the OpenAPI document a real embedded stack serves (SQLite), with a valid
# token, for FUZZ_SECONDS: prints requests made, 5xx answers, schema violations and 429s, and
# fails unless the last three are 0 (tests/support/fuzz.py; its smoke is in make test:
# tests/gateway/test_schemathesis.py).
FUZZ_SECONDS ?= 300
fuzz: setup
	$(BIN)/python -m tests.support.fuzz --seconds $(FUZZ_SECONDS)

clean:
	rm -rf $(VENV) node_modules .truerun .mypy_cache .ruff_cache .pytest_cache
