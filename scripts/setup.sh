#!/usr/bin/env bash
# Set up TritonForge in ./.venv (idempotent). CPU machines get the CPU build of PyTorch 2.13.0;
# set TRITONFORGE_TORCH to another requirement (e.g. "torch" on a CUDA machine) to change it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "${TRITONFORGE_TORCH:-torch==2.13.0}"
.venv/bin/python -m pip install -q -e ".[dev,tensorboard,ray]"
.venv/bin/python -c "import torch, triton, tritonforge; print('tritonforge', tritonforge.__version__, '| torch', torch.__version__, '| triton', triton.__version__)"
