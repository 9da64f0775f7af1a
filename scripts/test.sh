#!/usr/bin/env bash
# The test command (README, CI): set up both environments, then run every non-GPU test.
# GPU tests: `.venv/bin/python -m pytest -m gpu` on a machine with a CUDA GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_vllm_cpu.sh
.venv/bin/ruff check src tests benchmarks
.venv/bin/python -m pytest -m "not gpu" -q --durations=15 "$@"
