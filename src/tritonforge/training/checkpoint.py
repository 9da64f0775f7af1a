"""Training checkpoints (save, find, resume, keep last K) and versioned HF weight exports.

Covers: `save_checkpoint` / `load_checkpoint` of model, optimizer and scheduler states, the step,
a free-form `extra` dict (data position, policy version, ...) and the RNG states of every rank
(python, numpy, torch, CUDA); `latest_checkpoint`, pruning to the last K; `full_model_state`
(the full, unsharded state dict, gathered with torch.distributed.checkpoint.state_dict, so FSDP2
and plain modules go through one path) and `export_hf` (an HF-format directory an inference
engine can load).
Does not cover: deciding when to save (the trainers) or pushing weights to an engine.

Layout: DIR/step_00000012/{state.pt, rng_rank0.pt, ...}; written to a temporary directory by rank
0 and renamed, so a crash never leaves a half checkpoint under a step name. Every rank reads the
full state from the shared directory when resuming (fine on one node or a shared filesystem).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from tritonforge.logging_setup import get_logger
from tritonforge.training.distributed import DistContext, barrier

__all__ = [
    "export_hf",
    "full_model_state",
    "get_rng_state",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "prune",
    "save_checkpoint",
    "set_rng_state",
]

log = get_logger(__name__)
_STEP_DIR = re.compile(r"^step_(\d+)$")
_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def get_rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def full_model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Full (unsharded) CPU state dict; a collective under FSDP (call on every rank)."""
    return get_model_state_dict(model, options=_FULL)


def list_checkpoints(directory: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of complete checkpoints under `directory`, oldest first."""
    d = Path(directory)
    if not d.is_dir():
        return []
    found = []
    for p in d.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and (p / "state.pt").is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(directory: str | Path) -> Path | None:
    found = list_checkpoints(directory)
    return found[-1][1] if found else None


def prune(directory: str | Path, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` checkpoints; returns the deleted paths."""
    found = list_checkpoints(directory)
    doomed = [p for _, p in found[: max(0, len(found) - keep_last)]]
    for p in doomed:
        shutil.rmtree(p, ignore_errors=True)
    return doomed


def save_checkpoint(
    directory: str | Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    ctx: DistContext,
    extra: dict[str, Any] | None = None,
    keep_last: int | None = None,
) -> Path:
    """Write DIR/step_{step:08d}; collective under FSDP (call on every rank). Returns the path."""
    d = Path(directory)
    final = d / f"step_{step:08d}"
    tmp = d / f".tmp_step_{step:08d}"
    model_sd = get_model_state_dict(model, options=_FULL)
    optim_sd = get_optimizer_state_dict(model, optimizer, options=_FULL)
    if ctx.is_main:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    barrier(ctx)
    torch.save(get_rng_state(), tmp / f"rng_rank{ctx.rank}.pt")
    if ctx.is_main:
        state = {
            "model": model_sd,
            "optimizer": optim_sd,
            "scheduler": scheduler.state_dict(),
            "step": step,
            "world_size": ctx.world_size,
            "extra": extra or {},
        }
        torch.save(state, tmp / "state.pt")
    barrier(ctx)
    if ctx.is_main:
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        if keep_last is not None:
            prune(d, keep_last)
        log.info("checkpoint saved", extra={"fields": {"path": str(final), "step": step}})
    barrier(ctx)
    return final


def load_checkpoint(
    path: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    scheduler: Any | None,
    ctx: DistContext,
) -> dict[str, Any]:
    """Restore states from a checkpoint dir (every rank); returns {"step", "extra"}.

    RNG states come from this rank's file when present (same world size), else rank 0's.
    """
    p = Path(path)
    state = torch.load(p / "state.pt", map_location="cpu", weights_only=False)
    set_model_state_dict(model, state["model"], options=StateDictOptions(full_state_dict=True))
    if optimizer is not None:
        set_optimizer_state_dict(
            model, optimizer, state["optimizer"], options=StateDictOptions(full_state_dict=True)
        )
    if scheduler is not None:
        scheduler.load_state_dict(state["scheduler"])
    rng_file = p / f"rng_rank{ctx.rank}.pt"
    if not rng_file.is_file():
        rng_file = p / "rng_rank0.pt"
    set_rng_state(torch.load(rng_file, map_location="cpu", weights_only=False))
    log.info("checkpoint loaded", extra={"fields": {"path": str(p), "step": state["step"]}})
    return {"step": int(state["step"]), "extra": state.get("extra", {})}


def export_hf(
    lm: nn.Module,
    state: dict[str, torch.Tensor],
    out: str | Path,
    tokenizer: Any | None = None,
    prefix: str = "",
    dtype: torch.dtype | None = None,
) -> Path:
    """Save `state` (keys optionally under `prefix`, e.g. "lm.") as an HF model dir at `out`
    with `lm`'s config (call on rank 0 only). Written to a temp dir, then renamed.

    `dtype`: the tensors' dtype, written to config.json (save_pretrained records the live
    model's dtype, e.g. fp32 master weights, which would make engines load bf16 files as fp32).
    """
    out = Path(out)
    sd = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
    tmp = out.parent / f".tmp_{out.name}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    lm.save_pretrained(tmp, state_dict=sd)
    if dtype is not None:
        cfg_path = tmp / "config.json"
        cfg = json.loads(cfg_path.read_text())
        name = str(dtype).removeprefix("torch.")
        cfg["dtype" if "dtype" in cfg or "torch_dtype" not in cfg else "torch_dtype"] = name
        if "torch_dtype" in cfg:
            cfg["torch_dtype"] = name
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out
