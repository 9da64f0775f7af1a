"""Supervised fine-tuning: the SFT trainer.

Covers: `SFTTrainer` (composition over `TrainCore`; `train_step` = token-mean negative
log-likelihood of the assistant tokens over the global batch, micro-batched under the token
budget, chunked log-probs; `eval_loss`; `fit` = epochs over a seeded order with a progress bar,
metrics, checkpoints every N steps and exact resume from the data position) over any examples
with `token_ids` and `loss_mask` (`SFTExample`).
Does not cover: data loading and tokenisation (jobs.sft_data), the `tritonforge sft` run
(jobs.sft.run_sft: config -> data -> train -> final model) or RL (training.rl).

Data order: epoch e visits the examples in `random.Random(seed + e)` order (no global RNG), and a
checkpoint stores (epoch, offset), so a resumed run sees exactly the batches an uninterrupted one
would have seen.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn
from tqdm import tqdm

from tritonforge.config.train import SFTRunConfig
from tritonforge.logging_setup import get_logger
from tritonforge.training.batching import TrainSequence, prepare_sequences, shard_by_rank
from tritonforge.training.checkpoint import latest_checkpoint
from tritonforge.training.core import TrainCore
from tritonforge.training.distributed import DistContext, all_reduce_sum
from tritonforge.training.metrics import MetricsLogger

__all__ = ["SFTExample", "SFTTrainer"]

log = get_logger(__name__)


class SFTExample(Protocol):
    """One tokenised example (jobs.sft_data.TokenizedExample is one): the token ids and the
    loss mask over them (1 on the tokens trained on)."""

    token_ids: list[int]
    loss_mask: list[int]


def _sequences(examples: Sequence[SFTExample]) -> list[TrainSequence]:
    return [TrainSequence(e.token_ids, e.loss_mask, index=i) for i, e in enumerate(examples)]


class SFTTrainer:
    """Next-token NLL on assistant tokens. See the module docstring."""

    def __init__(
        self,
        cfg: SFTRunConfig,
        model: nn.Module | None = None,
        tokenizer: Any | None = None,
        ctx: DistContext | None = None,
    ) -> None:
        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        self.core = TrainCore(
            cfg.model, cfg.optim, cfg.batch, cfg.dist, lm=model, ctx=ctx, tokenizer=tokenizer
        )
        self.ctx = self.core.ctx
        self.step = 0
        self.epoch = 0
        self.offset = 0

    def _nll(self, examples: Sequence[SFTExample], train: bool) -> tuple[float, float]:
        """Summed normalised NLL over this rank's share (backward when `train`), global tokens."""
        core, dev = self.core, self.ctx.device
        seqs, _ = prepare_sequences(_sequences(examples), self.cfg.batch)
        local = shard_by_rank(seqs, self.ctx.rank, self.ctx.world_size)
        n_tok, _ = core.global_counts(sum(s.num_scored for s in local), 0)
        total = torch.zeros((), dtype=torch.float64, device=dev)
        for mb in core.micro_batches(local):
            mb = mb.to(dev)
            logp, _ = core.forward(mb)
            loss = -(logp * mb.mask).sum() / max(n_tok, 1.0)
            if train:
                core.backward(loss)
            total += loss.detach().double()
        return float(all_reduce_sum(total, self.ctx)), n_tok

    def train_step(self, examples: Sequence[SFTExample]) -> dict[str, float]:
        """One optimizer step on a global batch (the same list on every rank)."""
        with self.core.gc.step():  # no garbage collection inside the step (gc_control.py)
            return self._train_step(examples)

    def _train_step(self, examples: Sequence[SFTExample]) -> dict[str, float]:
        t0 = time.perf_counter()
        loss, n_tok = self._nll(examples, train=True)
        gnorm, lr = self.core.optimizer_step()
        elapsed = time.perf_counter() - t0
        tokens = sum(len(e.token_ids) - 1 for e in examples)
        return {
            "loss": loss,
            "grad_norm": gnorm,
            "lr": lr,
            "tokens": n_tok,
            "tokens_per_s": tokens / max(elapsed, 1e-9),
            "time_s": elapsed,
        }

    @torch.no_grad()
    def eval_loss(self, examples: Sequence[SFTExample]) -> float:
        """Token-mean NLL of the assistant tokens of `examples` (no update)."""
        was = self.core.policy.training
        self.core.policy.eval()
        try:
            return self._nll(examples, train=False)[0]
        finally:
            self.core.policy.train(was)

    # ---------------------------------------------------------------- loop
    def _order(self, epoch: int, n: int) -> list[int]:
        order = list(range(n))
        if self.cfg.sft.shuffle:
            random.Random(self.cfg.sft.seed + epoch).shuffle(order)
        return order

    def total_steps(self, n: int) -> int:
        sft = self.cfg.sft
        total = sft.epochs * math.ceil(n / sft.batch_size)
        return min(total, sft.max_steps) if sft.max_steps else total

    def fit(
        self,
        examples: Sequence[SFTExample],
        logger: MetricsLogger | None = None,
        max_steps: int | None = None,
    ) -> float:
        """Train from the current position to the end (or `max_steps` total); last loss."""
        n, bs = len(examples), self.cfg.sft.batch_size
        total = self.total_steps(n) if max_steps is None else min(max_steps, self.total_steps(n))
        show = self.ctx.is_main and self.cfg.logging.progress
        bar = tqdm(total=total, initial=self.step, desc="sft", disable=not show, dynamic_ncols=True)
        loss = float("nan")
        while self.step < total and n:
            order = self._order(self.epoch, n)
            batch = [examples[i] for i in order[self.offset : self.offset + bs]]
            self.offset += bs
            if self.offset >= n:
                self.epoch, self.offset = self.epoch + 1, 0
            metrics = self.train_step(batch)
            self.step += 1
            loss = metrics["loss"]
            if logger is not None:
                logger.log(self.step, {**metrics, "epoch": self.epoch})
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.4f}")
            every = self.cfg.checkpoint.every_steps
            if every and self.step % every == 0:
                self.save_checkpoint()
        bar.close()
        return loss

    # ---------------------------------------------------------------- state
    def _ckpt_dir(self) -> Path:
        d = Path(self.cfg.checkpoint.dir)
        return d if d.is_absolute() else self.run_dir / d

    def save_checkpoint(self) -> Path:
        extra = {"epoch": self.epoch, "offset": self.offset}
        return self.core.save_checkpoint(
            self._ckpt_dir(), self.step, extra, self.cfg.checkpoint.keep_last
        )

    def resume(self, path: str | Path | None = None) -> bool:
        """Restore the newest (or given) checkpoint; False when there is none."""
        p = Path(path) if path is not None else latest_checkpoint(self._ckpt_dir())
        if p is None:
            return False
        state = self.core.load_checkpoint(p)
        self.step = state["step"]
        self.epoch = int(state["extra"]["epoch"])
        self.offset = int(state["extra"]["offset"])
        return True
