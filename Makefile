# mptfx: `make run` and `make test` set everything up first (idempotent, seconds when nothing changed).
SHELL := /bin/bash
VENV  ?= .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.mptfx-installed
# Checkers of k8s/ and the Dockerfile (checkov, kubernetes-validate, hadolint, kustomize via kubectl)
TOOLS_VENV  ?= .venv-tools
TOOLS_STAMP := $(TOOLS_VENV)/.mptfx-tools-installed
# The image every pod runs: mptfx:<version in pyproject.toml> (scripts/build_image.sh).
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)
IMAGE   ?= mptfx:$(VERSION)

.PHONY: setup tools services image run test test-unit test-integration test-e2e test-image test-faults lint bench performance lab clean

setup: $(STAMP)

# The stamp is older than the lock or the package metadata -> reinstall; otherwise nothing to do.
$(STAMP): requirements.lock pyproject.toml scripts/bootstrap.sh
	@bash scripts/bootstrap.sh $(VENV)
	@touch $(STAMP)

tools: $(TOOLS_STAMP)

# A venv of its own: checkov's pins must not move the pipeline's locked libraries.
$(TOOLS_STAMP): requirements-tools.lock $(STAMP)
	@[ -x $(TOOLS_VENV)/bin/python ] || $(PY) -m venv $(TOOLS_VENV)
	@echo "setup: installing requirements-tools.lock into $(TOOLS_VENV)"
	@$(VENV)/bin/uv pip sync --quiet --compile-bytecode --python $(TOOLS_VENV)/bin/python requirements-tools.lock
	@touch $(TOOLS_STAMP)

# PostgreSQL for the Kubernetes replay (installed with apt-get when missing; needs root).
services:
	@bash scripts/start_services.sh

# docker build when a Docker engine answers, else buildah (installed with apt-get when missing)
# FROM a local stand-in for python:3.10-slim-bookworm; BASE_IMAGE=... picks another base.
# Unchanged inputs reuse every layer.
image:
	@bash scripts/build_image.sh $(IMAGE)

run: setup
	$(VENV)/bin/mptfx run $(ARGS)

# `make test-image`: tests/image runs inside the image built (or reused) just before (`make
# test` builds it beside the other tests instead, scripts/run_tests.sh). Only where buildah cannot
# be had (not root, not CI) does the build's failure let pytest run, and tests/image skip.
IMAGE_FIRST = if bash scripts/build_image.sh $(IMAGE); then export MPTFX_IMAGE_BUILT=$(IMAGE); \
	elif [ "$$CI" = true ] || type -P buildah >/dev/null; then exit 2; fi; \
	export MPTFX_IMAGE=$(IMAGE);

# The test files run on one pytest-xdist worker more than there are cores: a worker waiting
# (a rollout's analysis window, a server starting, a command in the image) leaves its core to
# the others. One file stays on one worker, so the pipeline runs a module shares are made once;
# the longest files start first (tests/conftest.py, LONGEST_FIRST; xdist's own reordering would
# put the files with most tests first). Measured on 2 cores in docs/DEVELOPMENT.md.
WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
PARALLEL ?= -n $(WORKERS) --dist loadfile --no-loadscope-reorder

# Every tier but the fault runs; the image builds beside the other tiers (scripts/run_tests.sh).
test: setup tools services
	@PARALLEL="$(PARALLEL)" VENV=$(VENV) bash scripts/run_tests.sh $(IMAGE) -m "not faults" $(PYTEST_ARGS)

# The fault-injection runs (tests/e2e/test_reliability_e2e.py): twelve pipeline runs.
test-faults: setup services
	$(VENV)/bin/pytest -m faults $(PYTEST_ARGS)

# The inner loop: no subprocess, server or pipeline (tests/unit/conftest.py refuses them).
test-unit: setup
	$(VENV)/bin/pytest $(PARALLEL) tests/unit $(PYTEST_ARGS)

# Processes, PostgreSQL and the offline Kubernetes validators, but no pipeline run.
test-integration: setup tools services
	$(VENV)/bin/pytest $(PARALLEL) tests/integration $(PYTEST_ARGS)

test-e2e: setup services
	$(VENV)/bin/pytest tests/e2e $(PYTEST_ARGS)

test-image: setup services
	@$(IMAGE_FIRST) $(VENV)/bin/pytest tests/image $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .

# What a user measures: precision x XLA, auto's measured choice, batch, input, photo-scale data.
bench: setup
	$(VENV)/bin/mptfx bench --quick $(ARGS)

# docs/PERFORMANCE.md, generated from the run's results.json (command, date, machine, CPU flags).
performance: setup
	$(VENV)/bin/mptfx bench --quick --write-docs docs/PERFORMANCE.md $(ARGS)

# The developer instruments, from the checkout only (tools/lab; not in the wheel or the image):
# MFU and matmul ceilings, kernels, op profiles, Trainer overhead, publication, pipeline, stock TFX.
lab: setup
	$(PY) -m tools.lab --quick $(ARGS)

clean:
	rm -rf workspace .pytest_cache k8s-out
