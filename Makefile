# mptfx: `make run` and `make test` set everything up first (idempotent, seconds when nothing changed).
SHELL := /bin/bash
VENV  ?= .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.mptfx-installed

.PHONY: setup run test test-unit test-e2e lint bench clean

setup: $(STAMP)

# The stamp is older than the lock or the package metadata -> reinstall; otherwise nothing to do.
$(STAMP): requirements.lock pyproject.toml scripts/bootstrap.sh
	@bash scripts/bootstrap.sh $(VENV)
	@touch $(STAMP)

run: setup
	$(VENV)/bin/mptfx run $(ARGS)

test: setup
	$(VENV)/bin/pytest $(PYTEST_ARGS)

test-unit: setup
	$(VENV)/bin/pytest tests/unit $(PYTEST_ARGS)

test-e2e: setup
	$(VENV)/bin/pytest tests/e2e $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf workspace .pytest_cache
