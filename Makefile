# Two commands do everything: `make demo` (train, evaluate, export, translate on the bundled
# corpus) and `make test`. Each creates and fills .venv first when it is missing or stale.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

DEMO_DIR := runs/demo
DEMO_SENTENCE := In the beginning, God created the heavens and the earth.

.PHONY: demo test test-quick test-numerics docs lint format clean litertjs litertjs-package

# uv fills the virtualenv: it fetches and unpacks the wheels in parallel, where pip does one
# at a time. It writes the bytecode (`--compile-bytecode`) as pip does, because where
# PYTHONDONTWRITEBYTECODE is set nothing else would, and every process would compile
# TensorFlow's sources again to import it. uv
# reads its own settings (UV_DEFAULT_INDEX, UV_INDEX), not pip's: where it cannot install
# (an index that only pip is configured for, say), pip installs the same packages instead.
UV_VERSION := 0.13.9
UV_INSTALL := $(BIN)/uv pip install --quiet --python $(BIN)/python
PIP_INSTALL := $(BIN)/python -m pip install --quiet

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	if $(PIP_INSTALL) uv==$(UV_VERSION) && $(UV_INSTALL) --compile-bytecode -r requirements.txt; then \
		$(UV_INSTALL) --no-deps -e .; \
	else \
		echo "uv could not fill $(VENV) (it reads UV_DEFAULT_INDEX, not pip's settings): pip will"; \
		$(PIP_INSTALL) -r requirements.txt && $(PIP_INSTALL) --no-deps -e .; \
	fi
	touch $(STAMP)

# The browser of tests/test_web.py, which Playwright (requirements.txt) drives: Debian's
# chromium, installed where no Chromium is on the PATH or in $$CHROMIUM (CI runs as root on a
# clean clone; elsewhere apt-get runs through sudo). No browser is downloaded by Playwright.
BROWSER := $(VENV)/.chromium
$(BROWSER): $(STAMP)
	if [ -z "$$CHROMIUM" ] && ! command -v chromium >/dev/null && \
		! command -v chromium-browser >/dev/null; then \
		command -v apt-get >/dev/null || { echo "tests/test_web.py needs Chromium: install it" \
			"and put it on the PATH, or set CHROMIUM to its binary"; exit 1; }; \
		sudo=$$(test "$$(id -u)" -eq 0 || echo sudo); \
		$$sudo apt-get update -qq && $$sudo apt-get install -y -qq chromium; \
	fi
	touch $@

# Train the tiny preset on the bundled corpus, average its last checkpoints, score the test
# split with sacrebleu, export a SavedModel for TF Serving, and translate through the export.
# Evaluate and export decode as the experiment's `decoding` section says (demo.yaml). The
# average and the export are the demo's own: `make demo` again makes them again from the run's
# last checkpoints (--overwrite; without it, average_checkpoints keeps a model saved before,
# and export an earlier export's keras/; the SavedModel gets a new version beside the others).
demo: $(STAMP)
	$(BIN)/python -m trainers.train --config trainers/configs/demo.yaml --model-dir $(DEMO_DIR) \
		--verbose 2
	$(BIN)/python -m trainers.average_checkpoints --model-dir $(DEMO_DIR) --last 2 --overwrite
	$(BIN)/python -m trainers.evaluate --model-dir $(DEMO_DIR) --model model.averaged.keras \
		--split test
	$(BIN)/python -m trainers.export --model-dir $(DEMO_DIR) --model model.averaged.keras \
		--out saved_models/demo --overwrite
	echo "$(DEMO_SENTENCE)" | $(BIN)/python -m trainers.translate --model saved_models/demo

# Two pytest workers on TensorFlow, each taking whole test files (a module's fixtures train
# once), and beside them, in a process of its own, the JAX pass (the layer contracts and
# tests/jax/), whose report follows the TensorFlow pass's. Either pass failing fails the
# target. `make test` runs every test, as CI does; `make test-quick` leaves out the tests
# marked `slow` (end-to-end runs of the programs, learning tests), for the edit-test loop.
PYTEST_SELECT :=

test: $(STAMP) $(BROWSER) lint
	@jax_log=$$(mktemp); \
	KERAS_BACKEND=jax $(BIN)/python -m pytest -p no:cacheprovider $(PYTEST_SELECT) tests/jax \
		tests/test_layer_contracts.py > $$jax_log 2>&1 & jax_pass=$$!; \
	$(BIN)/python -m pytest -n 2 --dist loadfile $(PYTEST_SELECT); tensorflow_status=$$?; \
	wait $$jax_pass; jax_status=$$?; \
	echo; echo "The JAX pass (KERAS_BACKEND=jax), run beside the TensorFlow pass:"; \
	cat $$jax_log; rm -f $$jax_log; \
	test $$tensorflow_status -eq 0 -a $$jax_status -eq 0

test-quick:
	$(MAKE) test PYTEST_SELECT='-m "not slow"'

# The tests that compare exact outputs (marked `exact`: tests/README.md lists them with their
# rules) again on another numeric path than this machine's own: oneDNN off, XLA's and
# CTranslate2's instruction sets capped at AVX2, LiteRT's builtin kernels for XNNPACK's
# (tests/numeric_path.py, which first prints what each engine used and fails if one is not
# capped). A test that holds only on one CPU's last bits fails here, not on a user's machine
# (STYLE.md 22). CI runs it after `make test`.
test-numerics: $(STAMP) $(BROWSER)
	$(BIN)/python -m tests.numeric_path --run-exact-tests $(PYTEST_SELECT)

# The documentation site (docs/, mkdocs.yml) into site/: the guides and the API reference
# from the docstrings. --strict: a broken link or a docstring mkdocstrings cannot read fails.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache site

# The LiteRT.js files the web format ships (keras_transformer/export/web_assets/litertjs), from
# the npm packages its lockfile pins: for a maintainer changing the version, not for users.
WEB_ASSETS := keras_transformer/export/web_assets
litertjs:
	work=$$(mktemp -d) && cp $(WEB_ASSETS)/npm/package.json $(WEB_ASSETS)/npm/package-lock.json $$work/ \
		&& (cd $$work && npm ci --ignore-scripts --no-audit --no-fund) \
		&& cp $$work/node_modules/@litertjs/core/dist/index.js $(WEB_ASSETS)/litertjs/litertjs-core.js \
		&& cp $$work/node_modules/@litertjs/wasm-utils/dist/index.js $(WEB_ASSETS)/litertjs/litertjs-wasm-utils.js \
		&& cp $$work/node_modules/@litertjs/core/wasm/litert_wasm_compat_internal.js \
			$$work/node_modules/@litertjs/core/wasm/litert_wasm_compat_internal.wasm $(WEB_ASSETS)/litertjs/ \
		&& rm -rf $$work

# The lockfile's @litertjs/core whole (its four WASM builds, 38 MB) in build/litertjs-core, for
# benchmarks/web.py's comparison of the shipped compat build with the relaxed-SIMD one.
litertjs-package:
	work=$$(mktemp -d) && cp $(WEB_ASSETS)/npm/package.json $(WEB_ASSETS)/npm/package-lock.json $$work/ \
		&& (cd $$work && npm ci --ignore-scripts --no-audit --no-fund) \
		&& rm -rf build/litertjs-core && mkdir -p build \
		&& cp -r $$work/node_modules/@litertjs/core build/litertjs-core \
		&& rm -rf $$work
