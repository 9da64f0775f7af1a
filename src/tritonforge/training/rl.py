"""The RL trainer: one `train_step(trajectories)` = old/reference log-probs, loss, updates.

Covers: `RLTrainer` (composition over `TrainCore`: no framework trainer is subclassed) with
`train_step` (micro-batched gradient accumulation under a token budget, losses from the registry
normalised by the global token/sequence counts, `ppo_epochs` x `num_minibatches` optimizer
steps, grad clip, schedule), `StepMetrics`, the policy version counter, `save_weights` (versioned
HF dirs WEIGHTS/v{N} for engines that load from disk), `state_dict` (in-process engines),
and checkpoint/resume.
Does not cover: producing trajectories, advantages (the buffer fills `Trajectory.advantages`),
pushing weights to an engine, the sync/async schedule (the driver), or logging (the driver owns
the MetricsLogger so rollout and trainer metrics share one line).

Step guard (`rl.max_logprob_drop` > 0, training.step_guard): after the step's updates, no
correct answer of the batch (a turn judged correct) may have lost more than that many nats of
log-prob since the step began, and no anchor sequence (`anchors`: known correct answers such as
the SFT data, loss-masked tokens protected) more than that since the first step; otherwise the
step is halved (up to `rl.guard_halvings` times) or undone.

Old log-probs: with one update per step (ppo_epochs = num_minibatches = 1) old = current
log-probs detached (ratio 1, no extra forward). Otherwise they are computed once, without
gradients, before the first update. Reference log-probs are computed only when kl_coef > 0 (the
reference model is not even loaded otherwise). The batch is split into minibatches once per
step (seeded shuffle; the same split in every epoch). Distributed: every rank gets the same
global list, splits it the same way and trains its share of each minibatch
(training.batching.shard_by_rank), so N ranks compute the same update as one process.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tritonforge.config.train import TrainerConfig
from tritonforge.logging_setup import get_logger
from tritonforge.model_cast import cast_model
from tritonforge.training.batching import (
    TrainSequence,
    count_tokens,
    prepare_sequences,
    shard_by_rank,
    split_minibatches,
)
from tritonforge.training.checkpoint import latest_checkpoint
from tritonforge.training.core import (
    MetricSums,
    TrainCore,
    frozen_logprobs,
    gather_rows,
    make_policy,
)
from tritonforge.training.distributed import DistContext, shard_model
from tritonforge.training.losses import LossInputs, compute_loss
from tritonforge.training.model import PolicyModel, load_reference, load_tokenizer
from tritonforge.training.step_guard import StepGuard, protected_tokens
from tritonforge.types import Trajectory

__all__ = ["RLTrainer", "StepMetrics"]

log = get_logger(__name__)
Tensor = torch.Tensor


@dataclass
class StepMetrics:
    """What one train_step did. Loss metrics are token-weighted means over the step (loss and
    pg_loss: mean per optimizer update); counts are global (all ranks)."""

    step: int  # policy version after this step
    loss: float
    grad_norm: float
    lr: float
    tokens_per_s: float  # input tokens x epochs / wall time
    time_s: float
    num_seqs: int
    num_tokens: int  # scored (model) tokens
    total_tokens: int  # input positions (prompt + feedback + model), one epoch
    updates: int
    staleness_mean: float = 0.0  # version at the start of the step - sample's policy_version
    staleness_max: int = 0
    loss_metrics: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, float]:
        """Flat numbers for MetricsLogger (loss metrics and skip counts inlined)."""
        d = {k: v for k, v in asdict(self).items() if k not in ("loss_metrics", "skipped")}
        d.update({k: v for k, v in self.loss_metrics.items() if k != "loss"})
        d.update(self.skipped)
        return d


class RLTrainer:
    """Policy-gradient trainer on an HF causal LM. See the module docstring."""

    def __init__(
        self,
        cfg: TrainerConfig,
        model: nn.Module | None = None,
        tokenizer: Any | None = None,
        run_dir: str | Path | None = None,
        ctx: DistContext | None = None,
    ) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir) if run_dir is not None else Path(".")
        if tokenizer is None and model is None:
            tokenizer = _try_tokenizer(cfg)
        ref_lm = load_reference(cfg.model, cfg.loss, model)  # None unless kl_coef > 0
        self.core = TrainCore(
            cfg.model, cfg.optim, cfg.batch, cfg.dist, lm=model, ctx=ctx, tokenizer=tokenizer
        )
        self.ctx = self.core.ctx
        self.ref: PolicyModel | None = None
        if ref_lm is not None:
            ref_lm = cast_model(ref_lm, self.core.compute_dtype, self.ctx.device)
            self.ref = make_policy(ref_lm, cfg.batch, self.core.compute_dtype)
            shard_model(self.ref, ref_lm, cfg.dist, self.ctx)
        self.version = 0
        # known-correct answers the step guard also protects (e.g. the SFT data); see set_anchors
        self.anchors: list[TrainSequence] = []  # indices 0..n-1
        self._anchor_start: dict[int, Tensor] | None = None
        self._compute_entropy = cfg.loss.entropy_coef > 0 or cfg.rl.log_entropy

    # ---------------------------------------------------------------- properties
    @property
    def policy_version(self) -> int:
        """Number of train_steps done (tag for samples generated with the current weights)."""
        return self.version

    @property
    def model(self) -> nn.Module:
        """The HF model being trained (sharded parameters under FSDP)."""
        return self.core.lm

    # ---------------------------------------------------------------- training
    def train_step(self, items: Sequence[Trajectory | TrainSequence]) -> StepMetrics:
        """One policy update from a global batch of trajectories (same list on every rank).

        The policy version goes up by one when at least one optimizer step was taken
        (`StepMetrics.updates > 0`); a batch with nothing to score changes nothing."""
        with self.core.gc.step():  # no garbage collection inside the step (gc_control.py)
            return self._train_step(items)

    def _train_step(self, items: Sequence[Trajectory | TrainSequence]) -> StepMetrics:
        t0 = time.perf_counter()
        cfg, core = self.cfg, self.core
        seqs, skipped = prepare_sequences(items, cfg.batch)
        if any(s.advantages is None for s in seqs):
            raise ValueError("every trajectory needs per-token advantages (the buffer fills them)")
        # no signal: scored and measured like any batch, but its gradients are discarded
        signal = not seqs or self._has_signal(seqs)
        skipped["skipped_no_signal"] = 0 if signal else len(seqs)
        has_rollout = bool(seqs) and all(s.rollout_logprobs is not None for s in seqs)
        keys = self._metric_keys(has_rollout)
        seed = cfg.rl.seed * 1_000_003 + self.version
        minis = split_minibatches(seqs, cfg.rl.num_minibatches, cfg.rl.shuffle, seed)
        local = [shard_by_rank(m, self.ctx.rank, self.ctx.world_size) for m in minis]
        mine = [s for m in local for s in m]
        temp = cfg.rl.temperature
        need_old = cfg.rl.ppo_epochs > 1 or cfg.rl.num_minibatches > 1
        old = frozen_logprobs(core, core.policy, mine, temp) if need_old else None
        ref = frozen_logprobs(core, self.ref, mine, temp) if self.ref is not None else None
        guard = (
            self._guard(items, seqs) if cfg.rl.max_logprob_drop > 0 and seqs and signal else None
        )
        sums, gnorms, lr, updates = MetricSums(), [], 0.0, 0
        for _ in range(cfg.rl.ppo_epochs):
            for mini, local_mini in zip(minis, local):
                done = self._update(mini, local_mini, old, ref, has_rollout, sums, signal)
                if done is not None:
                    gnorms.append(done[0])
                    lr = done[1]
                    updates += 1
        reduced = sums.reduce(self.ctx, keys)
        for k in MetricSums.SUMMED:
            if k in reduced:
                reduced[k] /= max(updates, 1)
        if guard is not None and updates:
            reduced.update(
                guard.enforce(cfg.rl.max_logprob_drop, cfg.rl.guard_halvings).as_metrics()
            )
        stale = [self.version - s.policy_version for s in seqs] or [0]
        if updates:  # an empty batch (nothing scored) leaves the weights and version as they were
            self.version += 1
        elapsed = time.perf_counter() - t0
        return self._metrics(seqs, skipped, reduced, gnorms, lr, updates, stale, elapsed)

    def _has_signal(self, seqs: list[TrainSequence]) -> bool:
        """False when the loss has no gradient: every scored token's advantage is 0 (e.g. all
        groups answered alike) and no KL or entropy term is weighted. Such a batch must not step
        the optimizer: AdamW would still move every weight by its momentum, re-applying the last
        failure's push (about 1 / (1 - beta1) times in all) while nothing asked for it. It still
        counts as a training step (metrics, policy version, checkpoint cadence): the weights
        are simply unchanged by it."""
        loss = self.cfg.loss
        if loss.kl_coef > 0 or loss.entropy_coef > 0:
            return True
        return any(a != 0 for s in seqs for a, m in zip(s.advantages or [], s.loss_mask) if m)

    def _guard(self, items: Sequence[Any], seqs: list[TrainSequence]) -> StepGuard:
        """A StepGuard over the batch's correct answers (against the step's start) and the
        anchors (against their log-probs at the first step: drift cannot add up)."""
        temp = self.cfg.rl.temperature
        protect = {i: protected_tokens(t) for i, t in enumerate(items) if isinstance(t, Trajectory)}
        if self.anchors and self._anchor_start is None:
            self._anchor_start = frozen_logprobs(self.core, self.core.policy, self.anchors, temp)
        anchors = [replace(a, index=len(items) + a.index) for a in self.anchors]
        protect.update({a.index: list(a.loss_mask) for a in anchors})
        fixed = {len(items) + k: v for k, v in (self._anchor_start or {}).items()}
        return StepGuard(self.core, [*anchors, *seqs], protect, temp, fixed)

    def _update(
        self,
        mini: list[TrainSequence],
        local: list[TrainSequence],
        old: dict[int, Tensor] | None,
        ref: dict[int, Tensor] | None,
        has_rollout: bool,
        sums: MetricSums,
        signal: bool = True,
    ) -> tuple[float, float] | None:
        """Accumulate gradients over this rank's micro-batches (`local`) of a global minibatch
        (`mini`, the same on every rank), then step (without `signal`: discard them instead)."""
        core, dev = self.core, self.ctx.device
        n_tok, n_seq = count_tokens(mini)
        if n_tok == 0:  # the same on every rank: nothing to learn from this minibatch
            return None
        for mb in core.micro_batches(local):
            if has_rollout and mb.rollout_logp is None:  # a dummy keeps the metric keys aligned
                mb.rollout_logp = torch.zeros_like(mb.mask)
            mb = mb.to(dev)
            logp, ent = core.forward(mb, self.cfg.rl.temperature, self._compute_entropy)
            inputs = LossInputs(
                logp=logp,
                old_logp=gather_rows(old, mb, dev) if old is not None else logp.detach(),
                advantages=mb.advantages,
                mask=mb.mask,
                rollout_logp=mb.rollout_logp,
                ref_logp=gather_rows(ref, mb, dev) if ref is not None else None,
                entropy=ent,
                num_tokens=n_tok,
                num_seqs=n_seq,
            )
            loss, metrics = compute_loss(inputs, self.cfg.loss)
            core.backward(loss)
            sums.add(metrics, mb.num_tokens)
        return core.optimizer_step() if signal else core.discard_gradients()

    def _metric_keys(self, has_rollout: bool) -> list[str]:
        """The loss's metric names for this configuration (same on every rank)."""
        z, one = torch.zeros(1, 1), torch.ones(1, 1)
        inp = LossInputs(
            logp=z,
            old_logp=z,
            advantages=z,
            mask=one,
            rollout_logp=z if has_rollout else None,
            ref_logp=z if self.ref is not None else None,
            entropy=z if self._compute_entropy else None,
        )
        return sorted(compute_loss(inp, self.cfg.loss)[1])

    def _metrics(
        self,
        seqs: list[TrainSequence],
        skipped: dict[str, int],
        reduced: dict[str, float],
        gnorms: list[float],
        lr: float,
        updates: int,
        stale: list[int],
        elapsed: float,
    ) -> StepMetrics:
        n_tok, n_seq = count_tokens(seqs)
        total = sum(s.num_positions for s in seqs)
        return StepMetrics(
            step=self.version,
            loss=reduced.get("loss", 0.0),
            grad_norm=sum(gnorms) / len(gnorms) if gnorms else 0.0,
            lr=lr,
            tokens_per_s=total * self.cfg.rl.ppo_epochs / max(elapsed, 1e-9),
            time_s=elapsed,
            num_seqs=n_seq,
            num_tokens=n_tok,
            total_tokens=total,
            updates=updates,
            staleness_mean=sum(stale) / len(stale),
            staleness_max=max(stale),
            loss_metrics=reduced,
            skipped=skipped,
        )

    # ---------------------------------------------------------------- weights and state
    def save_weights(self, directory: str | Path | None = None) -> Path:
        """Write the current weights as an HF dir DIR/v{policy_version} (DIR defaults to
        RUN_DIR/weights_dir) for an engine to load; keeps the newest `keep_weights`. Every rank
        must call it under FSDP; returns the path."""
        base = Path(directory) if directory is not None else self._under_run(self.cfg.weights_dir)
        path = self.core.export(base / f"v{self.version}")
        if self.ctx.is_main:
            versions = sorted(
                (int(p.name[1:]), p)
                for p in base.iterdir()
                if p.is_dir() and p.name.startswith("v") and p.name[1:].isdigit()
            )
            for _, old in versions[: max(0, len(versions) - self.cfg.keep_weights)]:
                shutil.rmtree(old, ignore_errors=True)
        return path

    def state_dict(self) -> dict[str, Tensor]:
        """HF-keyed weights for an in-process engine: live tensors in one process (copy them
        if they must survive the next train_step), a gathered CPU copy under FSDP."""
        return self.core.full_state_dict()

    def _under_run(self, p: str) -> Path:
        path = Path(p)
        return path if path.is_absolute() else self.run_dir / path

    def checkpoint(self, extra: dict[str, Any] | None = None) -> Path:
        """Save model/optimizer/scheduler/RNG + version + `extra` (e.g. the driver's data
        position) under RUN_DIR/checkpoint.dir/step_{version}; keeps the last K."""
        extra = {**(extra or {}), "policy_version": self.version}
        d = self._under_run(self.cfg.checkpoint.dir)
        return self.core.save_checkpoint(d, self.version, extra, self.cfg.checkpoint.keep_last)

    def resume(self, path: str | Path | None = None) -> dict[str, Any] | None:
        """Load `path` or the newest checkpoint in checkpoint.dir; returns its `extra` (None
        if there is none)."""
        p = (
            Path(path)
            if path is not None
            else latest_checkpoint(self._under_run(self.cfg.checkpoint.dir))
        )
        if p is None:
            return None
        state = self.core.load_checkpoint(p)
        self.version = int(state["extra"].get("policy_version", state["step"]))
        return state["extra"]

    def should_checkpoint(self) -> bool:
        every = self.cfg.checkpoint.every_steps
        return every > 0 and self.version > 0 and self.version % every == 0


def _try_tokenizer(cfg: TrainerConfig) -> Any | None:
    try:
        return load_tokenizer(cfg.model)
    except (OSError, ValueError) as exc:
        log.warning("no tokenizer next to the model; weight dirs will lack one: %s", exc)
        return None
