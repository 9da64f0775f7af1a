"""Where and how a worker runs: device resolution, the minimal environment, the sandbox spec.

Covers: `device_label`/`resolve_device`, `base_env` (no secrets; device pinned; set before torch
is imported in the fork server), `worker_spec` (the SandboxSpec of one candidate) and
`private_scratch` (the scratch dir of the rlimits-only mode). Does not cover: applying them (sandbox/isolation.py, sandbox/zygote.py).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

import tritonforge
from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.sandbox.isolation import NOBODY, SandboxSpec

_KEEP_ENV = (
    "PATH",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "TRITON_PTXAS_PATH",
    "TRITON_LIBCUDA_PATH",
    "CC",
    "VIRTUAL_ENV",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
)


def device_label(settings: EvalSettings) -> str:
    """The device a candidate is judged on, as verdicts name it ("cpu" or "cuda:N")."""
    if settings.device == "cpu" or (settings.device == "auto" and not torch.cuda.is_available()):
        return "cpu"
    return f"cuda:{settings.device_index}"


def resolve_device(settings: EvalSettings) -> str:
    """device_label, and an error when CUDA was asked for but torch sees none."""
    device = device_label(settings)
    if device != "cpu" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was requested but torch sees no CUDA device")
    return device


def base_env(device: str) -> dict[str, str]:
    """Minimal environment for the fork server and workers (no secrets, pinned device)."""
    src_root = str(Path(tritonforge.__file__).resolve().parents[1])
    env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        {
            "LANG": "C.UTF-8",
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            # workers are killed, never exit cleanly: unbuffered, so what the candidate printed
            # (e.g. just before a crash) reaches the judge instead of dying in a buffer
            "PYTHONUNBUFFERED": "1",
            # single-threaded libraries: a worker makes no thread after start-up (seccomp.py)
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MLIR_DISABLE_MULTITHREADING": "1",  # Triton's compiler passes on the GPU
            "KINETO_LOG_LEVEL": "5",
        }
    )
    env["PYTHONPATH"] = os.pathsep.join(
        [src_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    if device == "cpu":
        env.update({"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""})
    else:
        idx = int(device.split(":")[1])
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        env["CUDA_VISIBLE_DEVICES"] = visible[idx] if idx < len(visible) else str(idx)
        env["TRITONFORGE_WARM_GPU"] = os.environ.get("TRITONFORGE_WARM_GPU", "1")
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # is_available() without initialising CUDA
    return env


def worker_spec(s: EvalSettings, device: str, scratch: str | None) -> dict[str, Any]:
    lim = s.limits
    env = base_env(device)
    sandbox = SandboxSpec(
        isolation=s.sandbox if s.sandbox != "rlimits" else "rlimits",
        device="cpu" if device == "cpu" else "cuda",
        memory_mb=lim.memory_mb,
        cpu_seconds=lim.cpu_seconds,
        max_processes=lim.max_processes,
        max_open_files=lim.max_open_files,
        max_file_mb=lim.max_file_mb,
        scratch=scratch or "",
        env=env,
        allow_root=s.sandbox_allow_root,
    )
    return {"sandbox": sandbox.to_json(), "rss_limit_mb": lim.memory_mb}


def private_scratch() -> str:
    path = tempfile.mkdtemp(prefix="tf-scratch-")
    if os.getuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    os.chmod(path, 0o700)
    return path
