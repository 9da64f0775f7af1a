"""Optimizer, learning-rate schedule and the clipped optimizer step shared by SFT and RL.

Covers: AdamW with weight decay on matrices only (the fused kernel on CUDA), the warmup +
constant/cosine/linear schedule (`lr_factor`, a pure function of the step), and `clip_and_step`
(global grad norm, clip, step, zero grads; one host sync, for the returned norm), which works
for plain and FSDP2 (DTensor) parameters.
Does not cover: gradient accumulation (the trainers) or checkpointing the states.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tritonforge.config.train import OptimConfig
from tritonforge.training.master_adamw import MasterAdamW

__all__ = ["build_optimizer", "build_scheduler", "clip_and_step", "lr_factor"]


def build_optimizer(
    model: nn.Module, cfg: OptimConfig, masters: bool = False
) -> torch.optim.Optimizer:
    """AdamW over trainable params; 1-D params (norms, biases) get no weight decay. The fused
    kernel (one launch per parameter group and dtype) when `cfg.fused`, or by default when the
    parameters are plain CUDA tensors; torch's default otherwise (CPU, DTensors). `masters`:
    MasterAdamW (fp32 masters of bf16 parameters kept in the optimizer)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = cfg.fused
    if fused is None:
        fused = bool(params) and all(p.is_cuda and type(p) is nn.Parameter for p in params)
    if masters:
        kept = [g for g in groups if g["params"]]
        return MasterAdamW(kept, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, fused=fused)
    return torch.optim.AdamW(
        [g for g in groups if g["params"]],
        lr=cfg.lr,
        betas=tuple(cfg.betas),
        eps=cfg.eps,
        fused=fused or None,
    )


def lr_factor(step: int, cfg: OptimConfig) -> float:
    """Multiplier of cfg.lr at optimizer step `step` (0-based): linear warmup, then the schedule."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant" or cfg.total_steps is None:
        return 1.0
    span = max(1, cfg.total_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    if cfg.schedule == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        shape = 1.0 - progress
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * shape


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: OptimConfig
) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, cfg))


def _full(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's global value (FSDP2), else the tensor."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def clip_and_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    grad_clip: float,
) -> tuple[float, float]:
    """Clip the global grad norm to `grad_clip` (0: measure only), step, zero grads.

    Returns (grad norm before clipping, lr used by this step).
    """
    params = [p for p in model.parameters() if p.grad is not None]
    max_norm = grad_clip if grad_clip > 0 else float("inf")
    if isinstance(optimizer, MasterAdamW):  # the fp32 gradient sums it keeps
        norm = optimizer.clip_grad_norm_(max_norm)
    else:
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm) if params else torch.zeros(())
    lr = float(optimizer.param_groups[0]["lr"])
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return float(_full(norm)), lr
