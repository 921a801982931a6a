# robustfl — make run (default matrix) and make test (whole suite). Both create .venv when missing.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.robustfl-installed

.PHONY: setup run test lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,ray,flower]'
	$(BIN)/python -m robustfl._warm
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/robustfl matrix quick --store runs/quick.db --json runs/quick.json --plot runs/quick.png

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check robustfl tests benchmarks
	$(BIN)/mypy robustfl

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
