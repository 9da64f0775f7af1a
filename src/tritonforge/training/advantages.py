"""Per-token advantages from per-turn values (returns already normalised by the buffer).

Covers: which assistant turn each token belongs to (from turn spans or from runs of the loss
mask) and broadcasting per-turn values onto those tokens. Does not cover: computing returns
(rollout.returns) or group normalisation (the buffer owns it).

Turn index convention: `turn_index[t] = k` when token t is a model token of assistant turn k,
and -1 for every non-model token (prompt, feedback, padding); those get advantage 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tritonforge.types import Trajectory

__all__ = [
    "broadcast_turn_values",
    "trajectory_token_advantages",
    "turn_index_from_runs",
    "turn_index_from_spans",
    "turn_spans",
]

Tensor = torch.Tensor


def turn_spans(trajectory: Trajectory) -> list[tuple[int, int]]:
    """[start, end) token range of each assistant turn's response inside `trajectory.token_ids`."""
    spans = []
    for turn in trajectory.turns:
        start = turn.prompt_len
        spans.append((start, start + len(turn.response_ids)))
    return spans


def turn_index_from_spans(
    loss_mask: Sequence[int] | Tensor, spans: Sequence[tuple[int, int]]
) -> Tensor:
    """turn_index [T] (long): k on masked tokens inside spans[k], -1 elsewhere.

    Raises ValueError when spans overlap, run past T, or a model token lies in no span (the
    trajectory's records disagree with its mask: a rollout bug worth failing loudly on).
    """
    mask_t = torch.as_tensor(loss_mask).reshape(-1) > 0
    index_t = torch.full(mask_t.shape, -1, dtype=torch.long)
    covered_t = torch.zeros_like(mask_t)
    for k, (start, end) in enumerate(spans):
        if not 0 <= start <= end <= mask_t.numel():
            raise ValueError(
                f"turn {k} span [{start}, {end}) is outside the {mask_t.numel()} tokens"
            )
        if covered_t[start:end].any():
            raise ValueError(f"turn {k} span [{start}, {end}) overlaps an earlier turn")
        covered_t[start:end] = True
        index_t[start:end] = k
    if (mask_t & ~covered_t).any():
        first = int((mask_t & ~covered_t).nonzero()[0])
        raise ValueError(f"model token {first} lies in no turn span")
    return torch.where(mask_t, index_t, torch.full_like(index_t, -1))


def turn_index_from_runs(loss_mask: Sequence[int] | Tensor) -> Tensor:
    """turn_index [T] (long) when each turn is one contiguous run of mask == 1: the k-th run is
    turn k. Use spans instead when a turn may be empty or split by masked tokens."""
    mask_t = torch.as_tensor(loss_mask).reshape(-1) > 0
    prev_t = torch.cat([mask_t.new_zeros(1), mask_t[:-1]])
    run_id_t = torch.cumsum((mask_t & ~prev_t).long(), dim=0) - 1  # run starts counted
    return torch.where(mask_t, run_id_t, torch.full_like(run_id_t, -1))


def broadcast_turn_values(turn_index: Tensor, turn_values: Tensor | Sequence[float]) -> Tensor:
    """advantages [..., T] = turn_values[..., turn_index] (0 where turn_index == -1).

    `turn_index` is [T] with values [K], or batched [B, T] with [B, K] (pad values with anything
    beyond each trajectory's turns). Output dtype is float32 unless `turn_values` is a float tensor.
    """
    values = torch.as_tensor(turn_values)
    values = values if values.is_floating_point() else values.float()
    if turn_index.dim() != values.dim() or turn_index.shape[:-1] != values.shape[:-1]:
        raise ValueError(
            f"turn_index {tuple(turn_index.shape)} and values {tuple(values.shape)} do not match"
        )
    if turn_index.numel() and int(turn_index.max()) >= values.shape[-1]:
        raise ValueError(
            f"turn index {int(turn_index.max())} but only {values.shape[-1]} turn values"
        )
    model_t = turn_index >= 0
    if values.shape[-1] == 0:
        return torch.zeros(turn_index.shape, dtype=values.dtype)
    picked = values.gather(-1, turn_index.clamp(min=0).long())
    return torch.where(model_t, picked, torch.zeros_like(picked))


def trajectory_token_advantages(
    trajectory: Trajectory, turn_values: Sequence[float]
) -> list[float]:
    """Per-token advantages of one trajectory (what the buffer stores in `Trajectory.advantages`):
    turn k's value on turn k's model tokens, 0 elsewhere."""
    if len(turn_values) != len(trajectory.turns):
        raise ValueError(f"{len(turn_values)} turn values for {len(trajectory.turns)} turns")
    index_t = turn_index_from_spans(trajectory.loss_mask, turn_spans(trajectory))
    return broadcast_turn_values(index_t, list(turn_values)).tolist()
