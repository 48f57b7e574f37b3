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
# Extra JupyterLab options: make lab LAB_ARGS="--no-browser --port 8890".
LAB_ARGS ?=
# JupyterLab refuses to start as root without --allow-root; containers and CI often run as root.
LAB_ROOT := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root)
export SERVICE_DATABASE_URL ?= sqlite:///var/service.db

.PHONY: serve test lab bench drills migrate lint typecheck notebooks lock clean

$(STAMP): pyproject.toml $(LOCK)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

serve: $(STAMP)  ## migrate, then serve http://$(HOST):$(PORT) with the delivery worker inside
	$(BIN)/python -m service serve --host $(HOST) --port $(PORT) --workers $(WORKERS)

migrate: $(STAMP)
	$(BIN)/python -m service migrate

test: $(STAMP)  ## the whole suite: pytest over tests/, strict nbval over notebooks/
	$(BIN)/python -m pytest tests notebooks --nbval \
		--nbval-kernel-name python3 -p no:cacheprovider

lab: $(STAMP)  ## JupyterLab on the notebooks, with the project's environment
	$(BIN)/python -m jupyter lab --notebook-dir notebooks $(LAB_ROOT) $(LAB_ARGS)

notebooks: $(STAMP)  ## re-run every notebook in place (after a change to what they show)
	$(BIN)/python -m analytics.render notebooks

bench: $(STAMP)
	$(BIN)/python -m benchmarks

drills: $(STAMP)
	$(BIN)/python -m benchmarks.drills

lint: $(STAMP)
	$(BIN)/ruff check service analytics tests benchmarks

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
