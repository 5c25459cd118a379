# `make demo` and `make test` each set up .venv (Python >= 3.12, found by scripts/find-python) and run.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast lint fuzz bench clean notebooks docs

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py
	@test -x $(PY) || "$$(sh scripts/find-python)" -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/eqsat demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) scripts/typecheck.py
	$(PY) -m pytest -n auto --maxprocesses 4

# the edit-test loop: everything but the slow tier (fuzzers, proofs, rule checks, networks, notebooks,
# dtype and batch grids past their first point)
test-fast: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -n auto --maxprocesses 4 -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) scripts/typecheck.py

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

notebooks: $(STAMP)
	$(PY) scripts/execute_notebooks.py

clean:
	rm -rf $(VENV) build dist site *.egg-info .pytest_cache .ruff_cache

fuzz: $(STAMP)
	EQSAT_FUZZ_EXAMPLES=$${EQSAT_FUZZ_EXAMPLES:-500} $(PY) -m pytest tests/test_fuzz.py -p no:cacheprovider -rA

bench: $(STAMP)
	$(PY) -m bench.rewrites
	$(PY) -m bench.real_models
	$(PY) -m bench.long_context
	$(PY) -m bench.optimizer_scaling
	$(PY) -m bench.first_call
	$(PY) -m bench.dynamic_batch
	$(PY) -m bench.paddle_inference --keep-host-memory
	$(PY) -m bench.paddle_inference --keep-host-memory --onednn
	$(PY) -m bench.cnn
	$(PY) -m bench.conv
	$(PY) -m bench.conv_layers
	$(PY) -m bench.conv_layers --network mobilenet_v2
	$(PY) -m bench.conv_layers --network mobilenet_v2 --onednn
	$(PY) -m bench.conv_layers --network pp_lcnet_224 --repeats 9
	$(PY) -m bench.calibrated
	$(PY) -m bench.mirage
	$(PY) -m bench.cost_accuracy
	$(PY) -m bench.suite
