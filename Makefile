# `make demo` and `make test` each build .venv from scratch or refresh it, then run.
PY ?= python3
TORCH_INDEX ?=
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench venv clean browser docs

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev,bench,docs,carla]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/loopdrive demo --bank smoke --out runs/demo

# Debian's Chromium for the report's browser test (skipped with a reason where it cannot be installed)
browser:
	@command -v chromium >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || \
	  (apt-get install -y -q chromium >/dev/null 2>&1 || \
	   (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1)) || \
	  echo "chromium could not be installed: the report's browser test will be skipped"

test: $(STAMP) browser
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	# a test worker per core (4 at most), the Ray tests one at a time on one of them; the slowest: what to trim
	HF_HUB_OFFLINE=1 RAY_AUTH_MODE=disabled $(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist loadgroup --durations=15

# the documentation site into site/ (tests/docs builds it too, --strict, and opens it in Chromium)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python benchmarks/sim_throughput.py

clean:
	rm -rf $(VENV) runs site
