"""Statistics of played episodes: pass rates per turn, repair rate, rewards.

Covers: `episode_stats(trajectories)`, the numbers the before/after measurement and the demo
report: pass rate (any turn correct), pass@turn1, pass@turn2 (correct at the first or second
turn), `repair_rate` = P(second turn correct | first turn not correct) with its denominator
`repair_attempts` (every episode whose first turn was judged and not correct; one that ended
before a second turn counts as not repaired), mean return of the first turn (`mean_reward`), best
turn reward and the share of episodes where some turn compiled; `speedup_geomean`, the geometric
mean over episodes of the best timed speedup of a correct turn (None when none was timed).
Does not cover: playing episodes (rollout.agent) or rollout-batch statistics during training
(rollout.buffer_stages, which reports the same turn-level rates per step).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tritonforge.types import Status, Trajectory, Turn

__all__ = ["EPISODE_KEYS", "episode_stats", "speedup_geomean", "turn_correct"]

EPISODE_KEYS = (
    "episodes",
    "pass_rate",
    "first_turn_pass",
    "pass_at_turn2",
    "repair_rate",
    "repair_attempts",
    "mean_reward",
    "mean_best_turn_reward",
    "compiled_rate",
)


def turn_correct(turn: Turn) -> bool:
    return turn.verdict is not None and turn.verdict.status is Status.CORRECT


def _repairs(valid: Sequence[Trajectory]) -> tuple[int, int]:
    """(episodes wrong at turn 1, of those correct at turn 2)."""
    wrong = [t for t in valid if t.turns[0].verdict is not None and not turn_correct(t.turns[0])]
    fixed = sum(1 for t in wrong if len(t.turns) > 1 and turn_correct(t.turns[1]))
    return len(wrong), fixed


def episode_stats(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """The numbers of `EPISODE_KEYS` over `trajs` (rates over all episodes, failed ones too)."""
    n = len(trajs)
    valid = [t for t in trajs if t.turns]
    if not valid:
        return {k: 0.0 for k in EPISODE_KEYS} | {"episodes": float(n)}
    wrong, fixed = _repairs(valid)
    return {
        "episodes": float(n),
        "pass_rate": sum(any(turn_correct(x) for x in t.turns) for t in valid) / n,
        "first_turn_pass": sum(turn_correct(t.turns[0]) for t in valid) / n,
        "pass_at_turn2": sum(any(turn_correct(x) for x in t.turns[:2]) for t in valid) / n,
        "repair_rate": fixed / wrong if wrong else 0.0,
        "repair_attempts": float(wrong),
        "mean_reward": sum(t.turns[0].ret for t in valid) / n,
        "mean_best_turn_reward": sum(max(x.reward for x in t.turns) for t in valid) / n,
        "compiled_rate": sum(
            any(x.verdict is not None and x.verdict.compiled for x in t.turns) for t in valid
        )
        / n,
    }


def speedup_geomean(trajs: Sequence[Trajectory]) -> float | None:
    """Geometric mean, over the episodes with a correct timed turn, of its best speedup."""
    best = [
        max(x.verdict.speedup for x in t.turns if turn_correct(x) and x.verdict.speedup)
        for t in trajs
        if any(turn_correct(x) and x.verdict.speedup for x in t.turns)
    ]
    return math.exp(sum(math.log(b) for b in best) / len(best)) if best else None
