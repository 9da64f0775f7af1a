"""The training core shared by the SFT and RL trainers: one policy, its optimizer, its step.

Covers: `TrainCore` (builds or adopts the HF model, wraps it in `PolicyModel`, moves it to the
device, compiles its decoder layers and checkpoints the chosen ones (model.accelerate_layers),
shards it with FSDP2 under torchrun, owns AdamW + schedule; builds packed or padded
micro-batches, runs their forwards, scaled backwards and the clipped optimizer step; keeps FSDP
ranks in step with dummy micro-batches; saves/loads checkpoints; exports HF weights and the full
state dict), `frozen_logprobs` (no-grad log-probs of a set of sequences, for old-policy and
reference log-probs) and `MetricSums` (token-weighted metric accumulation on the device, one host
sync when reduced).
Does not cover: losses or data (the trainers), the schedule of checkpoints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tritonforge.config.train import BatchConfig, DistConfig, ModelConfig, OptimConfig
from tritonforge.logging_setup import get_logger
from tritonforge.model_cast import cast_model
from tritonforge.training import checkpoint as ckpt
from tritonforge.training.batching import MicroBatch, TrainSequence, make_micro_batches
from tritonforge.training.distributed import (
    DistContext,
    all_reduce_max,
    all_reduce_sum,
    barrier,
    decoder_layers,
    init_distributed,
    shard_model,
)
from tritonforge.training.gc_control import StepGC
from tritonforge.training.logprobs import head_ops
from tritonforge.training.master_adamw import MasterAdamW
from tritonforge.training.model import (
    PolicyModel,
    accelerate_layers,
    checkpoint_indices,
    compute_dtype,
    load_causal_lm,
    masters_in_optimizer,
    param_dtype,
    prepare_for_training,
)
from tritonforge.training.optim import build_optimizer, build_scheduler, clip_and_step
from tritonforge.training.packing import make_packed_micro_batches, pack_micro_batch

__all__ = [
    "MetricSums",
    "TrainCore",
    "check_vocabulary",
    "frozen_logprobs",
    "gather_rows",
    "make_policy",
    "pad_id_of",
    "use_compile",
]

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
        sharded = self.ctx.distributed and dist_cfg.fsdp
        self.param_dtype = param_dtype(model_cfg, sharded)
        if lm is None:
            lm = load_causal_lm(model_cfg, dtype=self.param_dtype)
        else:
            lm = prepare_for_training(cast_model(lm, self.param_dtype), model_cfg)
        self.lm = lm.to(self.ctx.device)
        self.tokenizer = tokenizer
        self.pad_id = pad_id_of(lm, tokenizer)
        self.compute_dtype = compute_dtype(model_cfg)
        self.compiled = use_compile(model_cfg, self.ctx.device)
        self.gc = StepGC(batch_cfg.gc_full_every)  # the collector kept out of each step
        self.policy = make_policy(self.lm, batch_cfg, self.compute_dtype, self.compiled)
        n_layers = len(decoder_layers(self.lm))
        ckpt_layers = (
            checkpoint_indices(n_layers, model_cfg.checkpoint_layers)
            if model_cfg.gradient_checkpointing
            else []
        )
        accelerate_layers(self.lm, self.compiled, ckpt_layers)
        mp = self.compute_dtype if self.compute_dtype != self.param_dtype else None
        shard_model(self.policy, self.lm, dist_cfg, self.ctx, mp)
        masters = masters_in_optimizer(model_cfg, sharded)
        self.optimizer = build_optimizer(self.policy, optim_cfg, masters)
        self.scheduler = build_scheduler(self.optimizer, optim_cfg)
        self.optim_steps = 0

    # ---------------------------------------------------------------- micro-batches
    def micro_batches(self, seqs: Sequence[TrainSequence]) -> list[MicroBatch]:
        """This rank's micro-batches (packed when the policy packs), padded with dummies to the
        max count over ranks (FSDP needs every rank to run the same number of forwards and
        backwards)."""
        cfg, vocab = self.batch_cfg, self.lm.get_output_embeddings().weight.shape[0]
        if self.policy.packing:
            mbs = make_packed_micro_batches(
                seqs, cfg.micro_batch_tokens, self.pad_id, cfg.pack_multiple
            )
        else:
            mbs = make_micro_batches(seqs, cfg.micro_batch_tokens, self.pad_id)
        for mb in mbs:
            check_vocabulary(mb, vocab)
        if self.ctx.distributed:
            n = torch.tensor([len(mbs)], device=self.ctx.device)
            target = int(all_reduce_max(n, self.ctx).item())
            mbs += [self._dummy() for _ in range(target - len(mbs))]
        return mbs

    def _dummy(self) -> MicroBatch:
        if not self.policy.packing:
            return MicroBatch.dummy(self.pad_id)
        seq = TrainSequence([self.pad_id] * 3, [0, 0, 0])  # scores nothing
        mb = pack_micro_batch([seq], self.pad_id, self.batch_cfg.pack_multiple)
        return replace(mb, seq_index=[])  # stands for no sequence (else it would be number 0)

    def forward(
        self, mb: MicroBatch, temperature: float = 1.0, compute_entropy: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """(logp [B, L], entropy [B, L] | None) of a micro-batch already on the device."""
        return self.policy(mb, temperature, compute_entropy)

    def backward(self, loss: Tensor) -> None:
        """Backward of a globally normalised micro-batch loss (x world size: FSDP averages);
        with masters in the optimizer, its gradients are then summed in fp32 there."""
        (loss * self.ctx.world_size).backward()
        if isinstance(self.optimizer, MasterAdamW):
            self.optimizer.accumulate_grads()

    def optimizer_step(self) -> tuple[float, float]:
        """Clip, step, schedule; returns (grad norm, lr)."""
        gnorm, lr = clip_and_step(
            self.policy, self.optimizer, self.scheduler, self.optim_cfg.grad_clip
        )
        self.optim_steps += 1
        return gnorm, lr

    def discard_gradients(self) -> tuple[float, float]:
        """Drop the accumulated gradients without stepping (optimizer state, schedule and
        weights unchanged); returns (0.0, the lr a step would have used)."""
        self.optimizer.zero_grad(set_to_none=True)
        return 0.0, float(self.optimizer.param_groups[0]["lr"])

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


def check_vocabulary(mb: MicroBatch, vocab: int) -> None:
    """Every id the device will read (inputs, scored targets) is in [0, vocab); else a
    ValueError naming the sequence. On the host micro-batch: on the device a bad id would be
    a sync (to check) or a crash (an embedding or gather out of bounds). The unscored last
    token of a sequence is never read, so it is not checked."""
    ids, targets, mask = mb.input_ids.numpy(), mb.targets.numpy(), mb.mask.numpy()
    bad = (ids < 0) | (ids >= vocab) | (targets >= vocab)
    bad |= (mask > 0) & (targets < 0)  # a negative id would pass as "not scored"
    if bad.any():  # numpy: torch's CPU ops cost milliseconds each on a busy host
        row = int(np.flatnonzero(bad.any(axis=1))[0])
        raise ValueError(f"sequence {mb.seq_index[row]}: a token id is outside the vocabulary")


def use_compile(cfg: ModelConfig, device: torch.device) -> bool:
    """Whether to torch.compile the decoder layers and lm-head chunks ("auto": on CUDA)."""
    return cfg.compile == "on" or (cfg.compile == "auto" and device.type == "cuda")


def make_policy(
    lm: nn.Module, cfg: BatchConfig, dtype: torch.dtype, compiled: bool = False
) -> PolicyModel:
    """The PolicyModel of `lm` as the batch config asks (packing, attention, chunk size)."""
    device = next(lm.parameters()).device
    return PolicyModel(
        lm, cfg.chunk_tokens, dtype, packing=cfg.packing, attn_ragged=cfg.attention,
        attn_uniform=cfg.attention_uniform, head_ops=head_ops(cfg.lm_head, compiled, device),
    )  # fmt: skip


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
            logp, _ = policy(mb.to(core.ctx.device), temperature, False)
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
    """Accumulates loss metrics: token-weighted means, sums (`loss`, `pg_loss`), maxima (`*_max`).

    Values stay on their device (0-d tensors from the losses): adding them never waits for the
    GPU; `reduce` syncs once."""

    SUMMED = ("loss", "pg_loss")

    def __init__(self) -> None:
        self.weighted: dict[str, Tensor] = {}
        self.summed: dict[str, Tensor] = {}
        self.maxed: dict[str, Tensor] = {}
        self.tokens = 0.0

    def add(self, metrics: dict[str, Tensor], tokens: int) -> None:
        self.tokens += tokens
        for k, v in metrics.items():
            x = torch.as_tensor(v).detach().to(torch.float64)
            if k in self.SUMMED:
                self.summed[k] = self.summed[k] + x if k in self.summed else x
            elif k.endswith("_max"):
                if tokens:
                    self.maxed[k] = torch.maximum(self.maxed[k], x) if k in self.maxed else x
            else:
                self.weighted[k] = (
                    self.weighted[k] + x * tokens if k in self.weighted else x * tokens
                )

    def reduce(self, ctx: DistContext, keys: Sequence[str]) -> dict[str, float]:
        """Means/sums/maxima over ranks; `keys` fixes the order (identical on every rank)."""
        wk = [k for k in keys if k not in self.SUMMED and not k.endswith("_max")]
        sk = [k for k in keys if k in self.SUMMED]
        mk = [k for k in keys if k.endswith("_max")]

        def vec(store: dict[str, Tensor], names: list[str], missing: float) -> Tensor:
            vals = [store[k] if k in store else missing for k in names]
            out = [torch.as_tensor(v, dtype=torch.float64).to(ctx.device) for v in vals]
            return (
                torch.stack(out) if out else torch.zeros(0, dtype=torch.float64, device=ctx.device)
            )

        t = torch.cat([vec(self.weighted, wk, 0.0), vec(self.summed, sk, 0.0)])
        t = torch.cat([t, torch.tensor([self.tokens], dtype=torch.float64, device=ctx.device)])
        all_reduce_sum(t, ctx)
        m = vec(self.maxed, mk, -math.inf) if mk else vec({}, ["none"], 0.0)
        all_reduce_max(m, ctx)
        sums, maxima = t.tolist(), m.tolist()
        tokens = max(sums[-1], 1.0)
        out = {k: sums[i] / tokens for i, k in enumerate(wk)}
        out.update({k: sums[len(wk) + i] for i, k in enumerate(sk)})
        out.update({k: maxima[i] for i, k in enumerate(mk)})
        return out
