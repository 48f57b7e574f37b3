# The two commands a newcomer needs: `make serve` and `make test`. Each sets itself up first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000
WORKERS ?= 1
export SERVICE_DATABASE_URL ?= sqlite:///var/service.db

.PHONY: serve test lab bench drills migrate lint typecheck notebooks clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,notebooks]'
	@touch $(STAMP)

serve: $(STAMP)  ## migrate, then serve http://$(HOST):$(PORT) with the delivery worker inside
	$(BIN)/python -m service serve --host $(HOST) --port $(PORT) --workers $(WORKERS)

migrate: $(STAMP)
	$(BIN)/python -m service migrate

test: $(STAMP)  ## the whole suite: pytest over tests/, strict nbval over notebooks/
	$(BIN)/python -m pytest tests notebooks --nbval \
		--nbval-kernel-name python3 -p no:cacheprovider

lab: $(STAMP)  ## JupyterLab on the notebooks, with the project's environment
	$(BIN)/python -m jupyter lab --notebook-dir notebooks

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

clean:
	rm -rf $(VENV) var .pytest_cache
