"""Rewards: pure functions from a Verdict to a float, in a registry keyed by name, on the task's
side of the boundary: the judge states facts (a Verdict), the task turns them into rewards.

Covers: `tritonforge`, `kevin`, `log_speedup`, `tritonforge_compile` (the `tritonforge` shape on
the speedup over torch.compile(reference) instead of eager; needs `compile_baseline`),
`tritonforge_original` (the original release's reward, preset `tritonforge`: like
`tritonforge_compile`, but its 0.1 goes to a kernel that compiled and launched), and the hack
penalty. A reward is always finite: a non-finite speedup counts as not measured. A verdict of a
degenerate problem (`Verdict.degenerate`: its output does not depend on its inputs, measured by
the judge) earns correctness only: every reward reads its speedup as not measured
(`rewarded_speedup`). Does not cover: per-turn returns or normalisation (see rollout.returns and
rollout.buffer). `compute_reward` is what a task (rollout/tasks.py) or a command calls, once per
answer; `conventional_reward(preset)` is the reward a preset's source used (the original
release's for the `tritonforge` preset), for commands that show a reward beside a verdict.
Changing a reward never re-judges anything: verdicts and their cache hold no reward.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tritonforge.config.registry import Registry
from tritonforge.types import Status, Verdict

RewardFn = Callable[[Verdict], float]
REWARDS: Registry[RewardFn] = Registry("reward")
register = REWARDS.register
# the reward each preset's source used: what commands show beside a verdict by default
PRESET_REWARDS = {"strict": "tritonforge", "kernelbench": "tritonforge",
                  "tritonforge": "tritonforge_original"}  # fmt: skip


def rewarded_speedup(v: Verdict, speedup: float | None) -> float | None:
    """The speedup a reward may credit: none on a degenerate problem (correctness only)."""
    return None if v.degenerate else speedup


def _shaped(v: Verdict, speedup: float | None) -> float:
    speedup = rewarded_speedup(v, speedup)
    if v.status is Status.CORRECT:
        return 0.3 + (min(max(speedup - 1.0, 0.0), 2.0) if speedup is not None else 0.0)
    if v.status.ran:
        return 0.1
    return 0.0


@register("tritonforge")
def tritonforge_reward(v: Verdict) -> float:
    """0 for no code or a fault; 0.1 if it ran but was wrong; 0.3 + min(max(s-1, 0), 2) if correct."""
    return _shaped(v, v.speedup)


@register("tritonforge_original")
def tritonforge_original_reward(v: Verdict) -> float:
    """The original TritonForge release: 0.1 if its kernels compiled and ran but it was wrong,
    0.3 + min(max(s - 1, 0), 2) if correct, where s is the speedup against torch.compile
    (Inductor default; 0.3 when that was not measured, e.g. on the CPU)."""
    if v.status is Status.CORRECT:
        return _shaped(v, v.speedup_vs_compile)
    return 0.1 if v.compiled else 0.0


@register("kevin")
def kevin_reward(v: Verdict) -> float:
    """Kevin-style: 0.3 + speedup if correct, else 0 (speedup counts 0 when it was not timed)."""
    if v.status is Status.CORRECT:
        return 0.3 + (rewarded_speedup(v, v.speedup) or 0.0)
    return 0.0


@register("log_speedup")
def log_speedup_reward(v: Verdict) -> float:
    """0.3 + ln(speedup) clipped to [-0.15, 3] if correct (never below 'ran but wrong'), 0.1 if wrong."""
    if v.status is Status.CORRECT:
        speedup = rewarded_speedup(v, v.speedup)
        if speedup is None or speedup <= 0:
            return 0.3
        return 0.3 + min(max(math.log(speedup), -0.15), 3.0)
    if v.status.ran:
        return 0.1
    return 0.0


@register("tritonforge_compile")
def tritonforge_compile_reward(v: Verdict) -> float:
    """`tritonforge` with the speedup over torch.compile(reference): 0.3 + min(max(s-1, 0), 2) if
    correct (s = speedup_vs_compile; 0.3 when it was not measured), 0.1 if wrong, else 0."""
    return _shaped(v, v.speedup_vs_compile)


def conventional_reward(preset: str) -> str:
    """The reward the preset's source used (`tritonforge` for a preset it does not know)."""
    return PRESET_REWARDS.get(preset, "tritonforge")


def compute_reward(
    v: Verdict, name: str | None = "tritonforge", hack_penalty: float = 0.0
) -> float:
    """Reward of `v` under the named function (None: the conventional one of the verdict's
    preset); reward hacks get `hack_penalty`. An unknown name is an UnknownName (a KeyError)."""
    if v.status is Status.REWARD_HACK:
        return hack_penalty
    fn = REWARDS.lookup(name if name is not None else conventional_reward(v.preset))
    reward = float(fn(v))
    if not math.isfinite(reward):  # a non-finite speedup (nan or inf times) counts as not timed
        unknown = {"speedup": None, "speedup_vs_compile": None}
        reward = float(fn(v.model_copy(update=unknown)))
    return reward
