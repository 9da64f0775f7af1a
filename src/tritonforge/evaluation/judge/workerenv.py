"""Where and how a worker runs: device resolution, the minimal environment, the sandbox spec.

Covers: `device_label`/`resolve_device`, `base_env` (no secrets; device pinned; set before torch
is imported in the fork server), `gpu_env` (the pinning of NVIDIA and AMD/ROCm GPUs),
`worker_spec` (the SandboxSpec of one candidate) and `private_scratch` (the scratch dir of the
rlimits-only mode). Does not cover: applying them (sandbox/isolation.py, sandbox/zygote.py).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

import tritonforge
from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.sandbox.isolation import NOBODY, SandboxSpec
from tritonforge.hardware import gpu_device_nodes, visible_list

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
    "ROCM_PATH",
    "ROCM_HOME",
    "HIP_PATH",
)
# ROCm runtime settings kept for GPU workers (e.g. HSA_OVERRIDE_GFX_VERSION, ROCR_VISIBLE_DEVICES).
_KEEP_PREFIXES_GPU = ("HSA_", "ROCR_", "HIP_")


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
        env.update(gpu_env(int(device.split(":")[1]), os.environ))
    return env


def gpu_env(index: int, environ: Mapping[str, str]) -> dict[str, str]:
    """Variables pinning a GPU worker to device `index` of the judge's view, NVIDIA or AMD.

    The ROCm runtime variables (HSA_*, ROCR_*, HIP_*) pass through; HIP_VISIBLE_DEVICES is
    narrowed like CUDA_VISIBLE_DEVICES (HIP reads both). ROCR_VISIBLE_DEVICES, applied first by
    the runtime, is kept as given. The AMD part is untested on hardware (see tritonforge.hardware).
    """
    env = {k: v for k, v in environ.items() if k.startswith(_KEEP_PREFIXES_GPU)}
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        visible = visible_list(environ, name) or []
        if name == "CUDA_VISIBLE_DEVICES" or name in environ:
            env[name] = visible[index] if index < len(visible) else str(index)
    env["TRITONFORGE_WARM_GPU"] = environ.get("TRITONFORGE_WARM_GPU", "1")
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
        device_nodes=[] if device == "cpu" else gpu_device_nodes(),
    )
    return {"sandbox": sandbox.to_json(), "rss_limit_mb": lim.memory_mb}


def private_scratch() -> str:
    path = tempfile.mkdtemp(prefix="tf-scratch-")
    if os.getuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    os.chmod(path, 0o700)
    return path
