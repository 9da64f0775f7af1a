"""The five buffer stages, each a registry keyed by name, plus token -> turn helpers.

Covers, in the order the buffer runs them (mirroring the original rollout buffer's hooks
get_group_data_meta_info / is_valid_group / filter_item / normalize_group_data / pad_group_data):
- STATS (group statistics, on the raw group): `kernel`, `basic`.
- VALIDITY: `all_valid` (n samples, all status "ok"), `allow_partial` (keep the "ok" samples if
  at least `min_group_size` remain).
- FILTERS (drop a whole group, with a reason): `none`, `drop_zero_variance`.
- NORMALIZERS (per-turn returns normalised across the group): `zscore`, `mean_only`, `none`
  (per turn index), `zscore_pooled` (one baseline over every turn of the group),
  `zscore_pooled_later` (first turns per turn index, later turns pooled).
- PADDERS: `none`, `duplicate` (copies with zero advantage), `duplicate_masked` (copies with
  zero advantage and an all-zero loss mask, so they add nothing to any loss term).
There is deliberately no reward-range filter. Does not cover: the buffer's state, regeneration
counting or files (see rollout.buffer).

Normalisation: for turn index t, the values are R_t of every sample that has a turn t;
zscore = (R - mean_t) / (std_t + eps) with the population std (ddof 0); mean_only = R - mean_t.
Per turn index, a later turn is compared only with the samples that reached it: with episodes that
stop at a correct turn, a repair that is the group's only second turn gets exactly 0 whether it
worked or not. `zscore_pooled` z-scores every R_t against the mean and std of all the group's
returns (every sample, every turn), so a repair that works gets a positive advantage and one that
fails a negative one; a group with no contrast between its samples (at every turn index all
returns equal, `is_zero_variance`) gets 0 everywhere, as under `zscore`.
`zscore_pooled_later` keeps the first turns' advantages of `zscore` and gives later turns those of
`zscore_pooled`, so only the credit of repair turns changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tritonforge.config.registry import Registry
from tritonforge.logging_setup import get_logger
from tritonforge.types import Status, Trajectory

if TYPE_CHECKING:  # pragma: no cover
    from tritonforge.config.buffer import BufferConfig

log = get_logger(__name__)

__all__ = [
    "FILTERS",
    "NORMALIZERS",
    "PADDERS",
    "STATS",
    "VALIDITY",
    "is_zero_variance",
    "token_advantages",
    "token_turn_index",
]

ValidityFn = Callable[[list[Trajectory], "BufferConfig"], tuple[list[Trajectory], str | None]]
FilterFn = Callable[[list[Trajectory], "BufferConfig"], str | None]
NormFn = Callable[[list[list[float]], float], list[list[float]]]
PadFn = Callable[[list[Trajectory], int], list[Trajectory]]
StatsFn = Callable[[list[Trajectory], "BufferConfig"], dict[str, float]]

VALIDITY: Registry[ValidityFn] = Registry("buffer validity stage")
FILTERS: Registry[FilterFn] = Registry("buffer filter stage")
NORMALIZERS: Registry[NormFn] = Registry("buffer normalize stage")
PADDERS: Registry[PadFn] = Registry("buffer padding stage")
STATS: Registry[StatsFn] = Registry("buffer stats stage")


def _register(table: Registry[Any], name: str) -> Callable[[Any], Any]:
    return table.register(name)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _std(xs: Sequence[float]) -> float:
    """Population standard deviation (ddof 0); 0 for fewer than two values."""
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def _by_turn(returns: list[list[float]]) -> list[list[float]]:
    """Column t = R_t of every sample that has a turn t (ragged groups allowed)."""
    depth = max((len(r) for r in returns), default=0)
    return [[r[t] for r in returns if len(r) > t] for t in range(depth)]


# ---------------------------------------------------------------------------- validity


@_register(VALIDITY, "all_valid")
def all_valid(trajs: list[Trajectory], cfg: BufferConfig) -> tuple[list[Trajectory], str | None]:
    """Keep the group only if it has group_size samples and every one has status "ok"."""
    if len(trajs) < cfg.group_size:
        return [], "incomplete"
    if any(t.status != "ok" for t in trajs):
        return [], "invalid_samples"
    return list(trajs), None


@_register(VALIDITY, "allow_partial")
def allow_partial(
    trajs: list[Trajectory], cfg: BufferConfig
) -> tuple[list[Trajectory], str | None]:
    """Drop failed samples; keep the rest if at least min_group_size remain."""
    ok = [t for t in trajs if t.status == "ok"]
    if len(ok) < cfg.min_group_size:
        return [], "too_few_valid"
    return ok, None


# ---------------------------------------------------------------------------- filters


def is_zero_variance(trajs: Sequence[Trajectory], tol: float = 1e-9) -> bool:
    """True when, at every turn index, all samples' returns are equal (within tol):
    every normalised advantage would be 0, so the group teaches nothing."""
    return _no_contrast([t.returns for t in trajs], tol)


def _no_contrast(returns: list[list[float]], tol: float = 0.0) -> bool:
    return all(max(col) - min(col) <= tol for col in _by_turn(returns))


@_register(FILTERS, "none")
def no_filter(trajs: list[Trajectory], cfg: BufferConfig) -> str | None:
    return None


@_register(FILTERS, "drop_zero_variance")
def drop_zero_variance(trajs: list[Trajectory], cfg: BufferConfig) -> str | None:
    return "zero_variance" if is_zero_variance(trajs, cfg.zero_variance_tol) else None


# ---------------------------------------------------------------------------- normalisation


@_register(NORMALIZERS, "zscore")
def zscore(returns: list[list[float]], eps: float) -> list[list[float]]:
    cols = _by_turn(returns)
    stats = [(_mean(c), _std(c)) for c in cols]
    return [[(x - stats[t][0]) / (stats[t][1] + eps) for t, x in enumerate(r)] for r in returns]


@_register(NORMALIZERS, "zscore_pooled")
def zscore_pooled(returns: list[list[float]], eps: float) -> list[list[float]]:
    """(R_t - mean) / (std + eps) over every return of the group; 0 when samples do not differ."""
    if _no_contrast(returns):
        return [[0.0] * len(r) for r in returns]
    pooled = [x for r in returns for x in r]
    mean, std = _mean(pooled), _std(pooled)
    return [[(x - mean) / (std + eps) for x in r] for r in returns]


@_register(NORMALIZERS, "zscore_pooled_later")
def zscore_pooled_later(returns: list[list[float]], eps: float) -> list[list[float]]:
    """First turns as `zscore` (plain GRPO); later turns as `zscore_pooled`."""
    first, pooled = zscore(returns, eps), zscore_pooled(returns, eps)
    return [[f[0], *p[1:]] if f else [] for f, p in zip(first, pooled, strict=True)]


@_register(NORMALIZERS, "mean_only")
def mean_only(returns: list[list[float]], eps: float) -> list[list[float]]:
    means = [_mean(c) for c in _by_turn(returns)]
    return [[x - means[t] for t, x in enumerate(r)] for r in returns]


@_register(NORMALIZERS, "none")
def no_norm(returns: list[list[float]], eps: float) -> list[list[float]]:
    return [list(r) for r in returns]


# ---------------------------------------------------------------------------- padding


@_register(PADDERS, "none")
def no_pad(trajs: list[Trajectory], n: int) -> list[Trajectory]:
    return list(trajs)


def _pad(trajs: list[Trajectory], n: int, mask: bool) -> list[Trajectory]:
    out = list(trajs)
    for i in range(max(n - len(trajs), 0)):
        src = trajs[i % len(trajs)]
        dup = src.model_copy(deep=True)
        dup.sample_index = len(out)
        dup.advantages = [0.0] * len(src.token_ids)
        dup.norm_reward = 0.0
        dup.meta["norm_returns"] = [0.0] * len(src.turns)
        dup.meta["padded"] = True
        dup.meta["padded_from"] = src.sample_index
        if mask:
            dup.loss_mask = [0] * len(src.loss_mask)
        out.append(dup)
    return out


@_register(PADDERS, "duplicate")
def pad_duplicate(trajs: list[Trajectory], n: int) -> list[Trajectory]:
    """Fill to n with copies (round-robin over the kept samples), advantage 0 on every token."""
    return _pad(trajs, n, mask=False)


@_register(PADDERS, "duplicate_masked")
def pad_duplicate_masked(trajs: list[Trajectory], n: int) -> list[Trajectory]:
    """As `duplicate`, and the copies' loss mask is all 0 (no KL/entropy double counting)."""
    return _pad(trajs, n, mask=True)


# ---------------------------------------------------------------------------- statistics


def _correct_speedups(traj: Trajectory) -> list[float | None]:
    return [
        t.verdict.speedup
        for t in traj.turns
        if t.verdict is not None and t.verdict.status is Status.CORRECT
    ]


@_register(STATS, "basic")
def basic_stats(trajs: list[Trajectory], cfg: BufferConfig) -> dict[str, float]:
    """Sizes and the distribution of R_0 (the episode return) over the valid samples."""
    ok = [t for t in trajs if t.status == "ok"]
    r0 = [t.turns[0].ret if t.turns else 0.0 for t in ok]
    return {
        "n_samples": float(len(trajs)),
        "n_valid": float(len(ok)),
        "reward_mean": _mean(r0),
        "reward_std": _std(r0),
        "reward_max": max(r0) if r0 else 0.0,
        "reward_min": min(r0) if r0 else 0.0,
        "zero_variance": float(bool(ok) and is_zero_variance(ok, cfg.zero_variance_tol)),
    }


@_register(STATS, "kernel")
def kernel_stats(trajs: list[Trajectory], cfg: BufferConfig) -> dict[str, float]:
    """basic + pass rate (any turn correct), first-turn pass rate, fast_p per threshold
    (a correct turn with speedup > p; untimed counts as not fast), best/final turn reward, turns."""
    out = basic_stats(trajs, cfg)
    ok = [t for t in trajs if t.status == "ok"]
    n = len(ok)
    speedups = [_correct_speedups(t) for t in ok]
    out["pass_rate"] = sum(1 for s in speedups if s) / n if n else 0.0
    first = [t.turns[0].verdict for t in ok if t.turns]
    out["first_turn_pass_rate"] = (
        sum(1 for v in first if v is not None and v.status is Status.CORRECT) / n if n else 0.0
    )
    for p in cfg.fast_p_thresholds:
        fast = sum(1 for s in speedups if any(x is not None and x > p for x in s))
        out[f"fast_{p:g}"] = fast / n if n else 0.0
    out["best_reward_mean"] = _mean([max(t.rewards) if t.turns else 0.0 for t in ok])
    out["final_reward_mean"] = _mean([t.rewards[-1] if t.turns else 0.0 for t in ok])
    out["turns_mean"] = _mean([float(len(t.turns)) for t in ok])
    return out


# ---------------------------------------------------------------------------- tokens


def token_turn_index(traj: Trajectory) -> list[int]:
    """Per token of `traj.token_ids`: the index of the turn that generated it, -1 elsewhere.

    A turn owns [prompt_len, prompt_len + len(response_ids)) where the loss mask is 1. A
    loss-masked token outside every span (inconsistent record) goes to the previous turn.
    """
    n = len(traj.token_ids)
    mask = traj.loss_mask
    idx = [-1] * n
    for t, turn in enumerate(traj.turns):
        for i in range(turn.prompt_len, min(turn.prompt_len + len(turn.response_ids), n)):
            if i < len(mask) and mask[i]:
                idx[i] = t
    last, stray = 0, 0
    for i in range(min(n, len(mask))):
        if idx[i] >= 0:
            last = idx[i]
        elif mask[i]:
            idx[i] = last
            stray += 1
    if stray:
        log.warning(
            "trajectory %s#%d: %d loss-masked tokens outside turn spans",
            traj.problem_id,
            traj.sample_index,
            stray,
        )
    return idx


def token_advantages(traj: Trajectory, per_turn: Sequence[float]) -> list[float]:
    """Broadcast per-turn values to tokens: token of turn t gets per_turn[t]; others 0.0."""
    return [float(per_turn[k]) if 0 <= k < len(per_turn) else 0.0 for k in token_turn_index(traj)]
