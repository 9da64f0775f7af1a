"""A trust region that binds on-policy: no update may make a correct answer of its batch much
less likely.

Why: with one update per batch the PPO ratio is exactly 1, so the clip never binds, and AdamW
moves every weight by about `lr` whatever the batch holds. On a near-perfect policy the only
signal of a batch is a failed sample or two; their tokens after the first mistake are often lines
of *other* problems' solutions, and pushing them down makes those problems' correct samples less
likely (see docs/benchmarks.md, "Why RL degraded a good policy"). The correct answers of the
same batch (every sample of an all-correct group has advantage 0, so no loss term holds them)
are exactly the behaviour the step must not break, so they are what this guard measures.

Covers: `protected_tokens` (per token of a trajectory: 1 on the tokens of its correct turns),
`select_guard_set` (the distinct sequences with a protected token), `max_logprob_drop` (the
largest decrease, over the checked sequences, of the summed log-prob of their protected tokens)
and `StepGuard` (snapshot the weights; after the update scale the step back, halving up to
`halvings` times and undoing it if that is not enough, until the drop is at most `max_drop`
nats). Cost: one no-grad forward over the distinct correct samples before the step and one per
check after it, and a copy of the trainable weights.
Does not cover: the update itself (training.rl) or log-prob computation (training.core).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tritonforge.training.batching import TrainSequence, shard_by_rank
from tritonforge.training.distributed import all_reduce_max
from tritonforge.types import Status, Trajectory

__all__ = [
    "GuardResult",
    "StepGuard",
    "max_logprob_drop",
    "protected_tokens",
    "select_guard_set",
]

Tensor = torch.Tensor


@dataclass(frozen=True)
class GuardResult:
    """What the guard did to one step: the drop before scaling, the scale kept, the checks."""

    drop: float
    scale: float
    checks: int

    def as_metrics(self) -> dict[str, float]:
        return {"guard_drop": self.drop, "guard_scale": self.scale, "guard_checks": self.checks}


def protected_tokens(traj: Trajectory) -> list[int]:
    """Per token of `traj.token_ids`: 1 on model tokens of turns judged correct, else 0."""
    out = [0] * len(traj.token_ids)
    for turn in traj.turns:
        if turn.verdict is not None and turn.verdict.status is Status.CORRECT:
            end = min(turn.prompt_len + len(turn.response_ids), len(out))
            for i in range(turn.prompt_len, end):
                out[i] = int(traj.loss_mask[i] > 0)
    return out


def select_guard_set(
    seqs: Sequence[TrainSequence], protect: dict[int, list[int]]
) -> list[TrainSequence]:
    """The distinct token sequences (first occurrence) with a protected token (`protect` maps a
    sequence's index to its per-token 0/1 list); identical samples are checked once."""
    out, seen = [], set()
    for s in seqs:
        key = tuple(s.token_ids)
        keep = protect.get(s.index)
        if key in seen or not keep or not any(keep[1 : len(s.token_ids)]):
            continue
        seen.add(key)
        out.append(s)
    return out


def max_logprob_drop(
    before: dict[int, Tensor],
    after: dict[int, Tensor],
    seqs: Sequence[TrainSequence],
    protect: dict[int, list[int]],
) -> float:
    """max over `seqs` of -(sum over protected tokens of (after - before)); 0 if none dropped.
    Position t of a log-prob row scores token t + 1."""
    worst = 0.0
    for s in seqs:
        keep = torch.tensor(protect[s.index][1 : len(s.token_ids)]) > 0
        n = min(keep.numel(), before[s.index].numel())
        delta = (after[s.index][:n].float().cpu() - before[s.index][:n].float().cpu())[keep[:n]]
        worst = max(worst, float(-delta.sum()))
    return worst


class StepGuard:
    """Snapshot -> update -> measure -> scale back. One instance per train_step."""

    def __init__(
        self,
        core,
        seqs: Sequence[TrainSequence],
        protect: dict[int, list[int]],
        temperature: float,
        fixed: dict[int, Tensor] | None = None,
    ) -> None:
        """`fixed`: log-probs to compare with instead of the step's start (by sequence index),
        e.g. the anchors' log-probs when RL began, so their drift cannot add up over steps."""
        from tritonforge.training.core import frozen_logprobs

        self.core, self.temperature, self.protect = core, temperature, protect
        ctx = core.ctx
        self.check = shard_by_rank(select_guard_set(seqs, protect), ctx.rank, ctx.world_size)
        self._logprobs = frozen_logprobs
        fixed = fixed or {}
        fresh = [s for s in self.check if s.index not in fixed]
        self.before = {**frozen_logprobs(core, core.policy, fresh, temperature), **fixed}
        self.params = [p for p in core.policy.parameters() if p.requires_grad]
        self.snapshot = [p.detach().clone() for p in self.params]

    def _drop(self) -> float:
        after = self._logprobs(self.core, self.core.policy, self.check, self.temperature)
        local = torch.tensor([max_logprob_drop(self.before, after, self.check, self.protect)])
        return float(all_reduce_max(local.to(self.core.ctx.device), self.core.ctx).item())

    @torch.no_grad()
    def _scale_to(self, scale: float, current: float) -> None:
        """Parameters := snapshot + (scale / current) * (parameters - snapshot)."""
        ratio = scale / current
        for p, old in zip(self.params, self.snapshot):
            p.copy_(old + ratio * (p - old))

    def enforce(self, max_drop: float, halvings: int) -> GuardResult:
        """Scale the step back until the drop is <= max_drop (see the module docstring)."""
        drop = first = self._drop()
        scale, checks = 1.0, 1
        while drop > max_drop and checks <= halvings:
            self._scale_to(scale / 2, scale)
            scale /= 2
            drop = self._drop()
            checks += 1
        if drop > max_drop:
            self._scale_to(0.0, scale)
            scale = 0.0
        return GuardResult(first, scale, checks)
