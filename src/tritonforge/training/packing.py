"""Sequence packing: several whole sequences in one row, so a micro-batch is a full token budget.

Covers: `plan_packs` (first-fit decreasing of input lengths into bins of `budget` tokens; a
sequence longer than the budget gets a bin of its own), `PackedInputs` (the packed model input:
token ids and position ids restarting at 0 for every sequence, cumulative sequence offsets for
varlen attention, the longest sequence, the common length when all are equal) and
`pack_micro_batch` / `make_packed_micro_batches`, which return ordinary `MicroBatch`es whose loss
tensors keep the padded [B, L] layout (one row per sequence, so sequence-level losses are
unchanged) and whose `packed` field is what the model runs on.
Does not cover: attention over the packed row (training.attention), log-probs.

Layout: sequence i (n_i = T_i - 1 input positions) occupies packed positions
[offset_i, offset_i + n_i); the row is padded up to a multiple of `multiple` with one extra
sequence of pad tokens, which attends only to itself and is never scored. Nothing crosses a
sequence boundary: attention is causal within each sequence, positions restart per sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from tritonforge.training.batching import MicroBatch, Scoring, TrainSequence, _move, collate

__all__ = ["PackedInputs", "make_packed_micro_batches", "pack_micro_batch", "plan_packs"]

Tensor = torch.Tensor


def plan_packs(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Indices of `lengths` grouped into bins whose sums stay <= `budget` (first-fit decreasing;
    deterministic: ties keep input order). A length above the budget is alone in its bin."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    bins: list[list[int]] = []
    loads: list[int] = []
    for i in order:
        n = lengths[i]
        for b, load in enumerate(loads):
            if load + n <= budget:
                bins[b].append(i)
                loads[b] += n
                break
        else:
            bins.append([i])
            loads.append(n)
    return bins


@dataclass
class PackedInputs:
    """One packed row: `input_ids`/`position_ids` [1, N], `cu_seqlens` [S + 1] int32 offsets of
    the S sequences in the row (the pad sequence included), `max_len` the longest of them and
    `uniform_len` their common length when all are equal (else 0: attention can then run as
    dense [S, H, L, D] batches)."""

    input_ids: Tensor
    position_ids: Tensor
    cu_seqlens: Tensor
    max_len: int
    uniform_len: int
    cu_host: Tensor | None = None  # cu_seqlens kept on the host (`to` does not move it)

    def host_offsets(self) -> Tensor:
        """`cu_seqlens` on the host (a copy, i.e. a device sync, only if made without one)."""
        if self.cu_host is None:
            self.cu_host = self.cu_seqlens.cpu()
        return self.cu_host

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def num_seqs(self) -> int:
        return int(self.cu_seqlens.shape[0]) - 1

    def to(self, device: torch.device | str) -> PackedInputs:
        return replace(
            self,
            input_ids=_move(self.input_ids, device),
            position_ids=_move(self.position_ids, device),
            cu_seqlens=_move(self.cu_seqlens, device),
        )


def pack_micro_batch(
    seqs: Sequence[TrainSequence], pad_id: int = 0, multiple: int = 1
) -> MicroBatch:
    """`seqs` as one MicroBatch: loss tensors padded [B, L] (see batching.collate), model input
    packed into one row of N = sum(T_i - 1) tokens rounded up to `multiple` (vectorised: the
    row's real tokens are the padded batch's real tokens in row-major order)."""
    mb = collate(seqs, pad_id)
    lengths = [s.num_positions for s in seqs]
    real = sum(lengths)
    total = -(-real // multiple) * multiple
    docs = lengths + ([total - real] if total > real else [])
    # numpy on the host (collate's tensors share its memory): torch's CPU ops here cost
    # milliseconds each on a busy host (its thread pool), while the device waits
    rows = mb.input_ids.numpy()
    parts = [rows[r, :n] for r, n in enumerate(lengths)]
    ids = np.concatenate([*parts, np.full(total - real, pad_id, dtype=np.int64)])
    starts = np.cumsum([0, *docs])
    pos = np.arange(total) - np.repeat(starts[:-1], docs)
    dst = mb.scoring.dst.numpy()  # collate's scored positions in the [B, L] layout
    src = starts[: len(seqs)][dst // mb.shape[1]] + dst % mb.shape[1]
    scoring = Scoring(torch.from_numpy(src), mb.scoring.dst, mb.scoring.targets)
    ids = torch.from_numpy(ids)
    cu = torch.from_numpy(starts.astype(np.int32))
    uniform = docs[0] if len(set(docs)) == 1 else 0
    packed = PackedInputs(
        ids[None], torch.from_numpy(pos)[None], cu, max(docs), uniform, cu_host=cu
    )
    return replace(mb, scoring=scoring, packed=packed)


def make_packed_micro_batches(
    seqs: Sequence[TrainSequence], budget: int, pad_id: int = 0, multiple: int = 1
) -> list[MicroBatch]:
    """Bins of at most `budget` real tokens (first-fit decreasing), each packed into one row."""
    bins = plan_packs([s.num_positions for s in seqs], budget)
    return [pack_micro_batch([seqs[i] for i in b], pad_id, multiple) for b in bins]
