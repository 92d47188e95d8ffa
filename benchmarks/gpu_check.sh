#!/usr/bin/env bash
# The GPU check (benchmarks/_gpu_check.py): the paged engine vs HF generate, one RL step vs TRL's
# GRPOTrainer, FSDP2 on one device, the vLLM engine if vLLM imports; random weights of Qwen2.5-0.5B's
# shapes on CUDA, nothing downloaded. Under 8 minutes on one GPU.
#
#   bash benchmarks/gpu_check.sh             # a CUDA machine
#   bash benchmarks/gpu_check.sh --dry-run   # the CPU, tiny shapes, same code paths (CI; under 2 minutes)
#
# Each section prints `result: <what> = X (target >= Y)`, `skipped: <what> (<why>)` or
# `failed: <what> (<error>)`; the exit status is 1 when a section failed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python="python3"; fi
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false
exec "$python" "$root/benchmarks/_gpu_check.py" "$@"
