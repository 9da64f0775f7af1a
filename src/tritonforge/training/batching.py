"""From trajectories to padded micro-batches under a token budget.

Covers: `TrainSequence` (the trainer's view of one sample: tokens, loss mask, per-token
advantages and rollout log-probs), length handling (truncate or drop past `max_seq_len`),
planning micro-batches (longest first, rows x longest row <= budget, whole sequences only, as
GSPO and the sequence-mean aggregations need), collating them (right padding, attention mask,
targets shifted by one), `Scoring` (where the scored positions sit, computed on the host so the
device never has to search for them), global token/sequence counts for loss normalisation,
sharding a global batch over data-parallel ranks and splitting it into minibatches.
Does not cover: packing several sequences into one row (training.packing builds the packed
model input of a MicroBatch), computing advantages (the buffer), log-probs, or moving data
between processes.

Alignment: a sequence of T tokens gives T - 1 positions; position t reads tokens [0..t] and
predicts token t + 1, so `targets[t] = token_ids[t+1]` and every per-token value of token t + 1
(loss mask, advantage, rollout log-prob) sits at position t. Targets are -100 where the mask is 0.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from tritonforge.config.train import BatchConfig
from tritonforge.types import Trajectory

__all__ = [
    "IGNORE",
    "MicroBatch",
    "Scoring",
    "TrainSequence",
    "collate",
    "count_tokens",
    "make_micro_batches",
    "plan_micro_batches",
    "prepare_sequences",
    "shard_by_rank",
    "split_minibatches",
]

IGNORE = -100
Tensor = torch.Tensor


@dataclass(frozen=True)
class TrainSequence:
    """One training sample; per-token lists have len(token_ids) entries (token-aligned)."""

    token_ids: list[int]
    loss_mask: list[int]
    advantages: list[float] | None = None
    rollout_logprobs: list[float] | None = None
    policy_version: int = 0
    index: int = 0  # position in the caller's list

    @classmethod
    def from_trajectory(cls, traj: Trajectory, index: int = 0) -> TrainSequence:
        return cls(
            token_ids=list(traj.token_ids),
            loss_mask=list(traj.loss_mask),
            advantages=list(traj.advantages) if traj.advantages else None,
            rollout_logprobs=list(traj.rollout_logprobs) if traj.rollout_logprobs else None,
            policy_version=traj.policy_version,
            index=index,
        )

    @property
    def num_positions(self) -> int:
        """Model input length: T - 1."""
        return len(self.token_ids) - 1

    @property
    def num_scored(self) -> int:
        """Model tokens that get a loss (nonzero mask of tokens 1..T-1). Counted in C
        (`list.count`): a Python loop over 8 x 8192 tokens took ~3 ms per call, on the step's
        path before the device has work, and a step calls it three times."""
        mask = self.loss_mask
        return max(len(mask) - 1, 0) - mask[1:].count(0)

    def check(self) -> None:
        n = len(self.token_ids)
        for name in ("loss_mask", "advantages", "rollout_logprobs"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(
                    f"sequence {self.index}: {name} has {len(value)} entries for {n} tokens"
                )


def prepare_sequences(
    items: Sequence[Trajectory | TrainSequence], cfg: BatchConfig
) -> tuple[list[TrainSequence], dict[str, int]]:
    """Validate, apply max_seq_len (truncate|drop), skip sequences with nothing to score.
    Each sequence's `index` becomes its position in `items` (keys for per-sequence stores).

    Returns (sequences, counts of "truncated", "dropped_long", "skipped_empty").
    """
    out: list[TrainSequence] = []
    counts = {"truncated": 0, "dropped_long": 0, "skipped_empty": 0}
    for i, item in enumerate(items):
        if isinstance(item, TrainSequence):
            seq = replace(item, index=i) if item.index != i else item
        else:
            seq = TrainSequence.from_trajectory(item, i)
        seq.check()
        if len(seq.token_ids) > cfg.max_seq_len:
            if cfg.overflow == "drop":
                counts["dropped_long"] += 1
                continue
            n = cfg.max_seq_len
            seq = replace(
                seq,
                token_ids=seq.token_ids[:n],
                loss_mask=seq.loss_mask[:n],
                advantages=seq.advantages[:n] if seq.advantages is not None else None,
                rollout_logprobs=seq.rollout_logprobs[:n] if seq.rollout_logprobs else None,
            )
            counts["truncated"] += 1
        if len(seq.token_ids) < 2 or seq.num_scored == 0:
            counts["skipped_empty"] += 1
            continue
        out.append(seq)
    return out, counts


def count_tokens(seqs: Sequence[TrainSequence]) -> tuple[int, int]:
    """(scored tokens, sequences with >= 1 scored token): the global loss normalisers."""
    scored = [s.num_scored for s in seqs]
    return sum(scored), sum(1 for n in scored if n > 0)


def plan_micro_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Group indices of `lengths`: longest first, a group grows while rows x its longest <= budget.

    A length above the budget gets a group of its own. Deterministic (stable sort).
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        longest = lengths[cur[0]] if cur else lengths[i]
        if cur and (len(cur) + 1) * longest > budget:
            groups.append(cur)
            cur = []
        cur.append(i)
    if cur:
        groups.append(cur)
    return groups


def _move(t: Tensor | None, device: torch.device | str) -> Tensor | None:
    """`t` on `device`; from pinned host memory when the target is a GPU (an asynchronous copy)."""
    if t is None or t.device == torch.device(device):
        return t
    if torch.device(device).type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


@dataclass
class Scoring:
    """The K scored positions of a micro-batch, found on the host.

    `src[k]` indexes the model's flattened positions (rows x length of its input, padded or
    packed), `dst[k]` the flattened [B, L] output layout, `targets[k]` is the token predicted
    there. With these the lm head runs on scored positions only and no device-side search (a
    host sync) is needed.
    """

    src: Tensor  # [K] long
    dst: Tensor  # [K] long
    targets: Tensor  # [K] long

    def to(self, device: torch.device | str) -> Scoring:
        return Scoring(
            _move(self.src, device), _move(self.dst, device), _move(self.targets, device)
        )

    @classmethod
    def of_padded(cls, targets_bl: Tensor) -> Scoring:
        """Scored positions (targets >= 0) of a padded [B, L] batch: src == dst."""
        idx_k = (targets_bl.reshape(-1) >= 0).nonzero().squeeze(1)
        return cls(idx_k, idx_k.clone(), targets_bl.reshape(-1)[idx_k].clone())


@dataclass
class MicroBatch:
    """Padded tensors of whole sequences; all [B, L] with L = longest T - 1 in the batch.

    The loss always sees this [B, L] layout. `packed` (training.packing) is the model input when
    the sequences run packed in one row instead of padded rows; `scoring` says where the scored
    positions are in either layout.
    """

    input_ids: Tensor  # long
    attention_mask: Tensor  # long, 1 on real tokens
    targets: Tensor  # long, IGNORE where not scored
    mask: Tensor  # float32, 1 where scored
    advantages: Tensor  # float32
    rollout_logp: Tensor | None  # float32
    seq_index: list[int]  # TrainSequence.index of each row
    num_tokens: int  # scored tokens
    num_seqs: int  # rows with >= 1 scored token
    real_tokens: int  # non-padding input positions
    scoring: Scoring | None = None
    packed: Any = None  # training.packing.PackedInputs: the packed model input, if packed

    def to(self, device: torch.device | str) -> MicroBatch:
        return replace(
            self,
            input_ids=_move(self.input_ids, device),
            attention_mask=_move(self.attention_mask, device),
            targets=_move(self.targets, device),
            mask=_move(self.mask, device),
            advantages=_move(self.advantages, device),
            rollout_logp=_move(self.rollout_logp, device),
            scoring=self.scoring.to(device) if self.scoring is not None else None,
            packed=self.packed.to(device) if self.packed is not None else None,
        )

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.input_ids.shape)  # type: ignore[return-value]

    @classmethod
    def dummy(cls, pad_id: int = 0) -> MicroBatch:
        """One row of two pad tokens that scores nothing: keeps FSDP ranks in step."""
        z = torch.zeros(1, 2)
        ids = torch.full((1, 2), pad_id, dtype=torch.long)
        targets = ids.clone()
        return cls(
            ids, torch.ones(1, 2, dtype=torch.long), targets, z, z.clone(), None, [], 0, 0, 2,
            Scoring.of_padded(targets),
        )  # fmt: skip


def collate(seqs: Sequence[TrainSequence], pad_id: int = 0) -> MicroBatch:
    """Right-pad `seqs` into one MicroBatch (see the module docstring for the alignment).
    Built in numpy: converting Python lists is 5-8x faster there than with torch.tensor, and
    on a GPU this runs while the device waits."""
    b, length = len(seqs), max(s.num_positions for s in seqs)
    input_ids = np.full((b, length), pad_id, dtype=np.int64)
    attn = np.zeros((b, length), dtype=np.int64)
    targets = np.full((b, length), IGNORE, dtype=np.int64)
    mask = np.zeros((b, length), dtype=np.float32)
    adv = np.zeros((b, length), dtype=np.float32)
    has_rollout = all(s.rollout_logprobs is not None for s in seqs)
    rollout = np.zeros((b, length), dtype=np.float32) if has_rollout else None
    for r, s in enumerate(seqs):
        n = s.num_positions
        ids = np.asarray(s.token_ids, dtype=np.int64)
        m = np.asarray(s.loss_mask, dtype=np.float32)[1:] > 0
        input_ids[r, :n] = ids[:-1]
        attn[r, :n] = 1
        targets[r, :n] = np.where(m, ids[1:], IGNORE)
        mask[r, :n] = m
        if s.advantages is not None:
            adv[r, :n] = np.asarray(s.advantages, dtype=np.float32)[1:] * m
        if rollout is not None:
            rollout[r, :n] = np.asarray(s.rollout_logprobs, dtype=np.float32)[1:] * m
    t = torch.from_numpy
    scored = np.flatnonzero(targets.reshape(-1) >= 0)  # numpy: a third of torch's nonzero time
    scoring = Scoring(t(scored), t(scored.copy()), t(targets.reshape(-1)[scored]))
    return MicroBatch(
        t(input_ids), t(attn), t(targets), t(mask), t(adv), t(rollout) if has_rollout else None,
        [s.index for s in seqs], int(mask.sum()), int((mask.sum(-1) > 0).sum()), int(attn.sum()),
        scoring,
    )  # fmt: skip


def make_micro_batches(
    seqs: Sequence[TrainSequence], budget: int, pad_id: int = 0
) -> list[MicroBatch]:
    """Plan by input length under `budget` padded tokens, then collate each group."""
    groups = plan_micro_batches([s.num_positions for s in seqs], budget)
    return [collate([seqs[i] for i in g], pad_id) for g in groups]


def shard_by_rank(seqs: Sequence[TrainSequence], rank: int, world_size: int) -> list[TrainSequence]:
    """This rank's share of a global batch, balanced by tokens (greedy longest-first).

    Every rank computes the same assignment from the same global list, so no communication is
    needed; a rank may get fewer sequences (or none) when there are fewer than ranks.
    """
    if world_size == 1:
        return list(seqs)
    load = [0] * world_size
    mine: list[TrainSequence] = []
    for i in sorted(range(len(seqs)), key=lambda i: -len(seqs[i].token_ids)):
        r = min(range(world_size), key=lambda k: (load[k], k))
        load[r] += len(seqs[i].token_ids)
        if r == rank:
            mine.append(seqs[i])
    return mine


def split_minibatches(
    seqs: Sequence[TrainSequence], n: int, shuffle: bool, seed: int
) -> list[list[TrainSequence]]:
    """Exactly `n` near-equal minibatches of whole sequences (some empty when there are fewer
    sequences than n); seeded shuffle first, so every rank gets the same split."""
    order = list(range(len(seqs)))
    if shuffle and n > 1:
        random.Random(seed).shuffle(order)
    return [[seqs[i] for i in order[k::n]] for k in range(n)]
