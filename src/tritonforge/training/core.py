"""The training core shared by the SFT and RL trainers: one policy, its optimizer, its step.

Covers: `TrainCore` (builds or adopts the HF model, wraps it in `PolicyModel`, moves it to the
device, shards it with FSDP2 under torchrun, owns AdamW + schedule; runs micro-batch forwards,
scaled backwards and the clipped optimizer step; keeps FSDP ranks in step with dummy
micro-batches; saves/loads checkpoints; exports HF weights and the full state dict),
`frozen_logprobs` (no-grad log-probs of a set of sequences, for old-policy and reference
log-probs) and `MetricSums` (token-weighted metric accumulation reduced over ranks).
Does not cover: losses or data (the trainers), the schedule of checkpoints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tritonforge.config.train import BatchConfig, DistConfig, ModelConfig, OptimConfig
from tritonforge.logging_setup import get_logger
from tritonforge.training import checkpoint as ckpt
from tritonforge.training.batching import MicroBatch, TrainSequence, make_micro_batches
from tritonforge.training.distributed import (
    DistContext,
    all_reduce_max,
    all_reduce_sum,
    barrier,
    init_distributed,
    shard_model,
)
from tritonforge.training.model import (
    PolicyModel,
    compute_dtype,
    load_causal_lm,
    param_dtype,
    prepare_for_training,
)
from tritonforge.training.optim import build_optimizer, build_scheduler, clip_and_step

__all__ = ["MetricSums", "TrainCore", "frozen_logprobs", "gather_rows", "pad_id_of"]

log = get_logger(__name__)
Tensor = torch.Tensor


def pad_id_of(lm: nn.Module, tokenizer: Any | None = None) -> int:
    """Any valid token id for padding (never scored): tokenizer pad, config pad/eos, else 0."""
    for value in (
        getattr(tokenizer, "pad_token_id", None),
        getattr(lm.config, "pad_token_id", None),
        getattr(lm.config, "eos_token_id", None),
    ):
        if isinstance(value, list):
            value = value[0] if value else None
        if isinstance(value, int) and value >= 0:
            return value
    return 0


class TrainCore:
    """One trainable policy (possibly FSDP-sharded) with its optimizer and scheduler."""

    def __init__(
        self,
        model_cfg: ModelConfig,
        optim_cfg: OptimConfig,
        batch_cfg: BatchConfig,
        dist_cfg: DistConfig,
        lm: nn.Module | None = None,
        ctx: DistContext | None = None,
        tokenizer: Any | None = None,
    ) -> None:
        self.model_cfg, self.optim_cfg, self.batch_cfg = model_cfg, optim_cfg, batch_cfg
        self.ctx = ctx or init_distributed(dist_cfg)
        if lm is None:
            lm = load_causal_lm(model_cfg)
        else:
            lm = prepare_for_training(lm.to(param_dtype(model_cfg)), model_cfg)
        self.lm = lm.to(self.ctx.device)
        self.tokenizer = tokenizer
        self.pad_id = pad_id_of(lm, tokenizer)
        self.compute_dtype = compute_dtype(model_cfg)
        self.policy = PolicyModel(self.lm, batch_cfg.chunk_tokens, self.compute_dtype)
        mp = self.compute_dtype if self.compute_dtype != param_dtype(model_cfg) else None
        shard_model(self.policy, self.lm, dist_cfg, self.ctx, mp)
        self.optimizer = build_optimizer(self.policy, optim_cfg)
        self.scheduler = build_scheduler(self.optimizer, optim_cfg)
        self.optim_steps = 0

    # ---------------------------------------------------------------- micro-batches
    def micro_batches(self, seqs: Sequence[TrainSequence]) -> list[MicroBatch]:
        """This rank's micro-batches, padded with dummies to the max count over ranks (FSDP
        needs every rank to run the same number of forwards/backwards)."""
        mbs = make_micro_batches(seqs, self.batch_cfg.micro_batch_tokens, self.pad_id)
        if self.ctx.distributed:
            n = torch.tensor([len(mbs)], device=self.ctx.device)
            target = int(all_reduce_max(n, self.ctx).item())
            mbs += [MicroBatch.dummy(self.pad_id) for _ in range(target - len(mbs))]
        return mbs

    def forward(
        self, mb: MicroBatch, temperature: float = 1.0, compute_entropy: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """(logp [B, L], entropy [B, L] | None) of a micro-batch already on the device.

        Without padding the attention mask is dropped, so attention takes the plain causal
        path (flash / memory-efficient SDPA kernels) instead of a materialised mask."""
        padded = mb.real_tokens != mb.input_ids.numel()
        attn = mb.attention_mask if padded else None
        return self.policy(mb.input_ids, attn, mb.targets, temperature, compute_entropy)

    def backward(self, loss: Tensor) -> None:
        """Backward of a globally normalised micro-batch loss (x world size: FSDP averages)."""
        (loss * self.ctx.world_size).backward()

    def optimizer_step(self) -> tuple[float, float]:
        """Clip, step, schedule; returns (grad norm, lr)."""
        gnorm, lr = clip_and_step(
            self.policy, self.optimizer, self.scheduler, self.optim_cfg.grad_clip
        )
        self.optim_steps += 1
        return gnorm, lr

    def global_counts(self, num_tokens: int, num_seqs: int) -> tuple[float, float]:
        """Scored tokens and sequences summed over ranks (each rank passes its own)."""
        t = torch.tensor([num_tokens, num_seqs], dtype=torch.float64, device=self.ctx.device)
        all_reduce_sum(t, self.ctx)
        return float(t[0]), float(t[1])

    # ---------------------------------------------------------------- states and weights
    def full_state_dict(self) -> dict[str, Tensor]:
        """HF-keyed full state dict: live tensors in one process, a gathered CPU copy under
        FSDP (a collective: call on every rank)."""
        if not self.ctx.distributed:
            return {k: v.detach() for k, v in self.lm.state_dict().items()}
        full = ckpt.full_model_state(self.policy)
        return {k[len("lm.") :]: v for k, v in full.items() if k.startswith("lm.")}

    def export(self, out: str | Path) -> Path:
        """HF-format model dir at `out` in the compute dtype (+ tokenizer); every rank calls."""
        state = self.full_state_dict()
        if self.ctx.is_main:
            state = {
                k: v.to(self.compute_dtype) if v.is_floating_point() else v
                for k, v in state.items()
            }
            ckpt.export_hf(self.lm, state, out, self.tokenizer, dtype=self.compute_dtype)
        barrier(self.ctx)
        return Path(out)

    def save_checkpoint(
        self, directory: str | Path, step: int, extra: dict[str, Any], keep_last: int
    ) -> Path:
        extra = {**extra, "optim_steps": self.optim_steps}
        return ckpt.save_checkpoint(
            directory, step, self.policy, self.optimizer, self.scheduler, self.ctx, extra, keep_last
        )

    def load_checkpoint(self, path: str | Path) -> dict[str, Any]:
        state = ckpt.load_checkpoint(path, self.policy, self.optimizer, self.scheduler, self.ctx)
        self.optim_steps = int(state["extra"].get("optim_steps", 0))
        return state


@torch.no_grad()
def frozen_logprobs(
    core: TrainCore,
    policy: nn.Module,
    seqs: Sequence[TrainSequence],
    temperature: float,
) -> dict[int, Tensor]:
    """Log-probs [T_i - 1] of each sequence (by `index`) under `policy` (the core's own or a
    reference wrapped the same way), without gradients."""
    out: dict[int, Tensor] = {}
    was_training = policy.training
    policy.eval()
    try:
        for mb in core.micro_batches(seqs):
            mb_d = mb.to(core.ctx.device)
            logp, _ = policy(mb_d.input_ids, mb_d.attention_mask, mb_d.targets, temperature, False)
            lengths = mb.attention_mask.sum(-1).tolist()
            for row, idx in enumerate(mb.seq_index):
                out[idx] = logp[row, : int(lengths[row])].detach()
    finally:
        policy.train(was_training)
    return out


def gather_rows(store: dict[int, Tensor], mb: MicroBatch, device: torch.device) -> Tensor:
    """[B, L] float32 tensor of stored per-sequence values for the rows of `mb` (zeros beyond;
    a dummy micro-batch has no rows and gets zeros)."""
    out = torch.zeros(mb.shape, dtype=torch.float32, device=device)
    for row, idx in enumerate(mb.seq_index):
        v = store[idx]
        out[row, : v.shape[0]] = v
    return out


class MetricSums:
    """Accumulates loss metrics: token-weighted means, sums (`loss`, `pg_loss`), maxima (`*_max`)."""

    SUMMED = ("loss", "pg_loss")

    def __init__(self) -> None:
        self.weighted: dict[str, float] = {}
        self.summed: dict[str, float] = {}
        self.maxed: dict[str, float] = {}
        self.tokens = 0.0

    def add(self, metrics: dict[str, Tensor], tokens: int) -> None:
        self.tokens += tokens
        for k, v in metrics.items():
            x = float(v)
            if k in self.SUMMED:
                self.summed[k] = self.summed.get(k, 0.0) + x
            elif k.endswith("_max"):
                self.maxed[k] = max(self.maxed.get(k, -math.inf), x if tokens else -math.inf)
            else:
                self.weighted[k] = self.weighted.get(k, 0.0) + x * tokens

    def reduce(self, ctx: DistContext, keys: Sequence[str]) -> dict[str, float]:
        """Means/sums/maxima over ranks; `keys` fixes the order (identical on every rank)."""
        wk = [k for k in keys if k not in self.SUMMED and not k.endswith("_max")]
        sk = [k for k in keys if k in self.SUMMED]
        mk = [k for k in keys if k.endswith("_max")]
        vec = [self.weighted.get(k, 0.0) for k in wk] + [self.summed.get(k, 0.0) for k in sk]
        t = torch.tensor([*vec, self.tokens], dtype=torch.float64, device=ctx.device)
        all_reduce_sum(t, ctx)
        m = torch.tensor([self.maxed.get(k, -math.inf) for k in mk] or [0.0], device=ctx.device)
        all_reduce_max(m, ctx)
        tokens = max(float(t[-1]), 1.0)
        out = {k: float(t[i]) / tokens for i, k in enumerate(wk)}
        out.update({k: float(t[len(wk) + i]) for i, k in enumerate(sk)})
        out.update({k: float(m[i]) for i, k in enumerate(mk)})
        return out
