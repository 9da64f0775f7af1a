"""Data parallelism for the trainers: process group set-up, FSDP2 sharding, small collectives.

Covers: `DistContext` (rank, world size, device) from torchrun's environment, `init_distributed`
(gloo on CPU, nccl on GPU; a no-op for one process), `shard_model` (FSDP2 `fully_shard` on each
decoder layer, then on the root module), and the collectives the trainers need (sum/max of a
tensor, barrier) which are identities in a single process.
Does not cover: splitting data by rank (training.batching.shard_by_rank), state dicts
(training.checkpoint uses torch.distributed.checkpoint.state_dict), tensor/pipeline parallelism.

Gradient scaling: FSDP averages gradients over ranks, so a trainer multiplies each micro-batch
loss by `world_size` (its losses are normalised by global token/sequence counts): the summed
gradient then equals the single-process full-batch gradient.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from tritonforge.config.train import DistConfig
from tritonforge.logging_setup import get_logger

__all__ = [
    "DistContext",
    "all_reduce_max",
    "all_reduce_sum",
    "barrier",
    "decoder_layers",
    "destroy_distributed",
    "init_distributed",
    "shard_model",
]

log = get_logger(__name__)


@dataclass(frozen=True)
class DistContext:
    """Where this process sits: rank in [0, world_size) and its device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _pick_device(local_rank: int) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init_distributed(cfg: DistConfig | None = None, device: str | None = None) -> DistContext:
    """Join the torchrun process group when WORLD_SIZE > 1 (idempotent); else a 1-process context.

    `device` forces "cpu" or "cuda"; default: CUDA (local rank's GPU) when available.
    """
    cfg = cfg or DistConfig()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cpu":
        dev = torch.device("cpu")
    elif device is not None and device.startswith("cuda"):
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = _pick_device(local_rank)
    if world > 1 and not dist.is_initialized():
        backend = cfg.backend
        if backend == "auto":
            backend = "nccl" if dev.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=cfg.timeout_s))
        log.info(
            "process group ready",
            extra={
                "fields": {"rank": rank, "world": world, "backend": backend, "device": str(dev)}
            },
        )
    return DistContext(rank=rank, world_size=world, local_rank=local_rank, device=dev)


def destroy_distributed() -> None:
    """Leave the process group if one is up."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated transformer blocks of a HF causal LM (`<base>.layers`), possibly empty."""
    base = getattr(model, getattr(model, "base_model_prefix", "model"), None)
    layers = getattr(base, "layers", None) if base is not None else None
    return list(layers) if layers is not None else []


def shard_model(
    root: nn.Module,
    lm: nn.Module,
    cfg: DistConfig,
    ctx: DistContext,
    compute_dtype: torch.dtype | None = None,
) -> nn.Module:
    """FSDP2: `fully_shard` every decoder layer of `lm`, then `root` (which owns the rest:
    embeddings, final norm, lm head, so tied weights stay in one group). No-op in one process.

    `compute_dtype` (e.g. bf16 over fp32 parameters): gathered parameters are cast to it for
    compute and gradients are reduced in fp32 (FSDP2 mixed precision).
    """
    if not ctx.distributed or not cfg.fsdp:
        return root
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:  # torch < 2.6 keeps it under _composable
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    kw = {"reshard_after_forward": cfg.reshard_after_forward, "mp_policy": mp}
    layers = decoder_layers(lm)
    for layer in layers:
        fully_shard(layer, **kw)
    fully_shard(root, **kw)
    log.info("FSDP2 sharded", extra={"fields": {"layers": len(layers), "world": ctx.world_size}})
    return root


def all_reduce_sum(t: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Sum of `t` over ranks (in place; returned). Identity in one process."""
    if ctx.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def all_reduce_max(t: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Max of `t` over ranks (in place; returned). Identity in one process."""
    if ctx.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t


def barrier(ctx: DistContext) -> None:
    if ctx.distributed:
        dist.barrier()
