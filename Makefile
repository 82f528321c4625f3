# The README's two commands: `make fit` (headline run) and `make test`. Both create .venv when it is
# missing and install the project into it first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# the documentation tools (mkdocs): `make docs` needs them, and so does `make test` (tests/test_docs_api_pages.py
# imports the site's hook)
DOCS_STAMP := $(VENV)/.docs-installed
# Extra pip arguments for torch alone, e.g. TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
# on a CPU machine that has no local torch wheel (keeps the CUDA-sized build away).
TORCH_PIP_ARGS ?=
CONFIG ?= configs/dvrp.yaml
ARGS ?=
# `make test` runs the test files on all cores (pytest-xdist, one file per worker at a time: a file's runs, Ray
# clusters and ports never overlap each other), the longest files first (tests/conftest.py: LONGEST_FIRST, kept in
# that order by --no-loadscope-reorder), and lists the 20 slowest tests; TEST_WORKERS=0 runs them one after the other
# in one process.
TEST_WORKERS ?= auto

.PHONY: install fit test test-slow lint docs docs-check docs-serve tensorboard bench bench-peer clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "torch==2.13.0" $(TORCH_PIP_ARGS)
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev]"
	$(BIN)/python -c "import torch, torchrl, tensordict, lightning; \
	assert torch.__version__.split('+')[0] == '2.13.0', torch.__version__; \
	print('stack: torch', torch.__version__, 'torchrl', torchrl.__version__, 'tensordict', tensordict.__version__, 'lightning', lightning.__version__)"
	touch $(STAMP)

fit: $(STAMP)
	$(BIN)/python -m pipelines.fit --config $(CONFIG) $(ARGS)

test: $(DOCS_STAMP)
	$(BIN)/python -c "import ray" 2>/dev/null || $(BIN)/python -m pip install -q -c constraints.txt -e ".[ray]"
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20 $(ARGS)

test-slow: $(DOCS_STAMP)
	$(BIN)/python -c "import ray" 2>/dev/null || $(BIN)/python -m pip install -q -c constraints.txt -e ".[ray]"
	$(BIN)/python -m pytest -q -m slow $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

# The documentation site, built into site/ with --strict: a broken link, a missing page or an API page whose object
# cannot be found fails the build.
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

docs-serve: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# The built site opened in headless Chromium (the system's: Debian's package `chromium`): the home page, an env page
# and an API page must show their headings and every image must load.
docs-check: docs
	$(BIN)/python docs/check_site.py site

tensorboard: $(STAMP)
	$(BIN)/tensorboard --logdir runs

bench: $(STAMP)
	$(BIN)/python benchmarks/dvrp_throughput.py $(ARGS)

bench-peer: $(STAMP)
	$(BIN)/python -c "import stable_baselines3" 2>/dev/null || $(BIN)/python -m pip install -q -c constraints.txt -e ".[bench]"
	$(BIN)/python benchmarks/peer_sb3.py $(ARGS)

clean:
	rm -rf $(VENV) runs lightning_logs site
