# The two commands a newcomer needs: `make serve` and `make test`. Each sets itself up first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# Every dependency pinned with its hashes, for Python 3.11 on Linux; `make lock` re-resolves it.
LOCK := requirements.lock
# pip-tools lives in a venv of its own, apart from the project's environment.
LOCK_VENV := .lock-venv
LOCK_TOOLS := pip==26.3 pip-tools==7.6.2
# Extra pip-compile options for `make lock`: --upgrade (move every pin), --upgrade-package sanic.
LOCK_ARGS ?=
HOST ?= 127.0.0.1
PORT ?= 8000
WORKERS ?= 1
# Extra `serve` options: make serve SERVE_ARGS=--no-worker.
SERVE_ARGS ?=
# make cluster: the rehearsal of docs/deploy.md on one machine (deploy/Procfile), on PostgreSQL and Redis.
CLUSTER_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/service_cluster
CLUSTER_REDIS_URL ?= redis://127.0.0.1:6379/0
CLUSTER_DIR ?= var/cluster
export CLUSTER_PORT ?= 8080
export SERVER_1_PORT ?= 8000
export SERVER_2_PORT ?= 8002
export WORKER_PORT ?= 8001
# Extra JupyterLab options: make lab LAB_ARGS="--no-browser --port 8890".
LAB_ARGS ?=
# JupyterLab refuses to start as root without --allow-root; containers and CI often run as root.
LAB_ROOT := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root)
export SERVICE_DATABASE_URL ?= sqlite:///var/service.db

.PHONY: serve cluster test lab bench drills migrate lint typecheck notebooks lock clean

$(STAMP): pyproject.toml $(LOCK)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

serve: $(STAMP)  ## migrate, then serve http://$(HOST):$(PORT) with the delivery worker inside
	$(BIN)/python -m service serve --host $(HOST) --port $(PORT) --workers $(WORKERS) $(SERVE_ARGS)

# The key is made once and kept in $(CLUSTER_DIR); the database must exist (createdb service_cluster).
cluster: $(STAMP)  ## nginx on :$(CLUSTER_PORT) in front of two servers and a worker (deploy/Procfile)
	@mkdir -p $(CLUSTER_DIR)
	@test -s $(CLUSTER_DIR)/secrets.key || (umask 077 && $(BIN)/python -c \
		'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())' > $(CLUSTER_DIR)/secrets.key)
	export SERVICE_DATABASE_URL=$(CLUSTER_DATABASE_URL) SERVICE_RATE_LIMIT_STORAGE=$(CLUSTER_REDIS_URL) \
		SERVICE_BASE_URL=http://127.0.0.1:$(CLUSTER_PORT) SERVICE_SECRETS_KEY=$$(cat $(CLUSTER_DIR)/secrets.key) \
		CLUSTER_DIR=$(abspath $(CLUSTER_DIR)) PATH=$(abspath $(BIN)):$$PATH && \
	$(BIN)/python -m service migrate && $(BIN)/honcho -f deploy/Procfile -d . start

migrate: $(STAMP)
	$(BIN)/python -m service migrate

# The suite runs on every core (up to TEST_PROCESSES), a file to a process: a notebook's cells run in
# order in one kernel, and each process makes its own PostgreSQL database and Redis key prefix.
TEST_PROCESSES ?= 4
test: $(STAMP)  ## the whole suite: pytest over tests/, strict nbval over notebooks/
	$(BIN)/python -m pytest tests notebooks --nbval --durations=15 \
		--nbval-kernel-name python3 -p no:cacheprovider \
		--numprocesses auto --maxprocesses $(TEST_PROCESSES) --dist loadfile

lab: $(STAMP)  ## JupyterLab on the notebooks, with the project's environment
	$(BIN)/python -m jupyter lab --notebook-dir notebooks $(LAB_ROOT) $(LAB_ARGS)

notebooks: $(STAMP)  ## re-run every notebook in place (after a change to what they show)
	$(BIN)/python -m analytics.render notebooks

bench: $(STAMP)
	$(BIN)/python -m benchmarks

drills: $(STAMP)
	$(BIN)/python -m benchmarks.drills

lint: $(STAMP)
	$(BIN)/ruff check service analytics tests benchmarks deploy

typecheck: $(STAMP)
	$(BIN)/mypy

lock:  ## re-resolve requirements.lock from pyproject.toml (existing pins kept unless LOCK_ARGS says)
	@test -x $(LOCK_VENV)/bin/pip-compile || \
		{ $(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/python -m pip install --quiet $(LOCK_TOOLS); }
	CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes \
		--allow-unsafe --strip-extras --extra dev --extra notebooks \
		--no-emit-index-url --no-emit-find-links --output-file $(LOCK) $(LOCK_ARGS) pyproject.toml

clean:
	rm -rf $(VENV) $(LOCK_VENV) var .pytest_cache
