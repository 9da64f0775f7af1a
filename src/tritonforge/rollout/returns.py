"""Per-turn returns from per-turn rewards, in a registry keyed by name.

Covers: pure functions rewards [r_0..r_{T-1}] -> returns [R_0..R_{T-1}], `ReturnsConfig` (from config.agent),
`compute_returns` and `apply_returns` (writes Turn.ret of a Trajectory). Does not cover: the
reward of one turn (see evaluation.rewards) or normalisation across a group (see rollout.buffer).

Modes:
- `discounted` (default): R_t = sum_{i>=t} gamma^(i-t) r_i, so a turn is credited with what
  it led to, discounted per turn (gamma 0.4: a fix two turns later counts 0.16).
- single-scalar trajectory modes, every turn gets the same value:
  `trajectory_last` = r_{T-1} (the final turn's reward), `trajectory_max` = max_t r_t,
  `trajectory_discounted` = R_0 of the discounted mode (the discounted sum from turn 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tritonforge.config.agent import ReturnsConfig
from tritonforge.config.registry import Registry
from tritonforge.types import Trajectory

__all__ = ["RETURNS", "ReturnsConfig", "apply_returns", "compute_returns", "discounted_returns"]

ReturnFn = Callable[[Sequence[float], float], list[float]]
RETURNS: Registry[ReturnFn] = Registry("returns mode")
register = RETURNS.register


@register("discounted")
def discounted_returns(rewards: Sequence[float], gamma: float = 0.4) -> list[float]:
    """R_t = r_t + gamma * R_{t+1}, computed backwards; [] for no turns."""
    out = [0.0] * len(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


@register("trajectory_last")
def trajectory_last(rewards: Sequence[float], gamma: float = 0.4) -> list[float]:
    """Every turn gets the final turn's reward (gamma unused)."""
    return [float(rewards[-1])] * len(rewards) if rewards else []


@register("trajectory_max")
def trajectory_max(rewards: Sequence[float], gamma: float = 0.4) -> list[float]:
    """Every turn gets the best turn's reward (gamma unused)."""
    return [float(max(rewards))] * len(rewards) if rewards else []


@register("trajectory_discounted")
def trajectory_discounted(rewards: Sequence[float], gamma: float = 0.4) -> list[float]:
    """Every turn gets R_0 = sum_i gamma^i r_i."""
    return [discounted_returns(rewards, gamma)[0]] * len(rewards) if rewards else []


def compute_returns(
    rewards: Sequence[float], cfg: ReturnsConfig | str | None = None, gamma: float | None = None
) -> list[float]:
    """Returns under the named mode (a ReturnsConfig or its `type`); `gamma` overrides cfg's."""
    if cfg is None:
        cfg = ReturnsConfig()
    name, g = (cfg, 0.4) if isinstance(cfg, str) else (cfg.type, cfg.gamma)
    if gamma is not None:
        g = gamma
    return RETURNS.lookup(name)(list(rewards), g)


def apply_returns(traj: Trajectory, cfg: ReturnsConfig | str | None = None) -> Trajectory:
    """Set `ret` of every turn from the turns' rewards (in place) and return the trajectory."""
    for turn, ret in zip(traj.turns, compute_returns(traj.rewards, cfg), strict=True):
        turn.ret = ret
    return traj
