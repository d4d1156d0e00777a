# Two entry points, each self-contained on a fresh machine:
#   make demo   create .venv, install nodus with the ML stack, run the quick-start workload
#   make test   create .venv, install nodus with test extras, lint, type-check, run the test suite
# and, for the inner loop once .venv exists:
#   make test-fast   lint, type-check and the quick tier (tests not marked slow)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
# torch first, alone: the CPU wheel on this disk; never let a resolver pull a CUDA build.
TORCH  := torch==2.13.0
STAMP  := $(VENV)/.installed
EXTRAS := '.[hf,methods,s3,plot,ray,lightning,metrics,test]'

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

# nodus's own bytecode, written once: pip compiles installed packages, not an editable checkout,
# and where PYTHONDONTWRITEBYTECODE is set (as on this machine) each of the suite's ~1,800 nodus
# processes would compile its modules again (docs/benchmarks.md, "The test suite").
COMPILE := $(BIN)/python -m compileall -q src

.PHONY: demo test test-fast venv clean quickstart-program chromium

# One line per phase, with its time: the install takes minutes, and a silent one looks hung.
PHASE = @start=$$(date +%s); echo "== $(1) …"; $(2) && echo "   done in $$(( $$(date +%s) - start )) s"

$(STAMP): pyproject.toml constraints.txt
	$(call PHASE,[1/4] virtual environment $(VENV),test -x $(BIN)/python || $(PYTHON) -m venv $(VENV))
	$(call PHASE,[2/4] pip,$(PIP) install -q --upgrade pip)
	$(call PHASE,[3/4] $(TORCH) (CPU),$(PIP) install -q -c constraints.txt $(TORCH))
	$(call PHASE,[4/4] nodus and its extras (Transformers; TRL; Ray; S3; tests),$(PIP) install -q -c constraints.txt -e $(EXTRAS))
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	NODUS_DEMO_VENV=$(abspath $(VENV)) bash examples/quickstart/demo.sh

# Headless Chromium and its ChromeDriver (Debian's packages) for tests/ui's page tests (the
# live ones drive it through WebDriver), and fish for the completion script's test in a real
# fish; installed once.
chromium:
	@test -x /usr/bin/chromium && test -x /usr/bin/chromedriver && command -v fish >/dev/null || { \
		echo "== chromium chromium-driver fish (tests/ui, tests/test_completion.py) …"; \
		SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium chromium-driver fish; }

# Three workers on two cores: at two, a worker waiting on its test's events (a save held by its
# write delay, a lease, a cluster's heartbeat) left 9-11 % of the cores idle; a third fills them
# (docs/benchmarks.md, "The test suite"). The tests wait on events, never on the clock, so a
# slower test under the extra load waits longer, never fails. The slowest are listed at the end.
test: $(STAMP) chromium
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(COMPILE)
	$(BIN)/python -m pytest -q -n 3 --dist loadgroup --durations=30

test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(COMPILE)
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not slow"

# `nodus qualify` trains the quick-start program: the package ships a byte-for-byte copy of it
# (installed packages hold no examples/). tests/hf/test_qualify.py fails while the two differ;
# after editing examples/quickstart/train.py, this copies it again.
quickstart-program:
	cp examples/quickstart/train.py src/nodus/stages/hf/qualify_program.py
	cp examples/quickstart/train.txt src/nodus/stages/hf/qualify_data.txt

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache
