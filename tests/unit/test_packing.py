"""Sequence packing: bin planning, the packed row's layout, and where the scored positions go."""

from __future__ import annotations

import torch

from tritonforge.training.batching import IGNORE, TrainSequence, collate
from tritonforge.training.packing import make_packed_micro_batches, pack_micro_batch, plan_packs


def seq(n: int, prompt: int = 2, index: int = 0, start: int = 10) -> TrainSequence:
    ids = list(range(start, start + n))
    mask = [0] * prompt + [1] * (n - prompt)
    return TrainSequence(ids, mask, [1.0 * m for m in mask], [-0.5 * m for m in mask], 0, index)


def test_plan_packs_first_fit_decreasing_by_hand():
    # lengths 9, 7, 6, 4, 3, 2 into 12: 9 -> bin0 (9); 7 -> bin1 (7); 6 -> bin2 (6);
    # 4 -> bin1 (11); 3 -> bin0 (12); 2 -> bin2 (8)
    lengths = [6, 2, 9, 4, 7, 3]
    assert plan_packs(lengths, 12) == [[2, 5], [4, 3], [0, 1]]
    assert plan_packs([20, 5, 5], 12) == [[0], [1, 2]]  # over the budget: alone
    assert plan_packs([], 8) == []


def test_packed_row_layout_by_hand():
    a = TrainSequence([5, 6, 7, 8], [0, 1, 1, 0], [0.0, 2.0, 3.0, 0.0], [0.0, -1.0, -2.0, 0.0])
    b = TrainSequence([9, 10, 11], [0, 0, 1], [0.0, 0.0, 4.0], [0.0, 0.0, -3.0], index=1)
    mb = pack_micro_batch([a, b], pad_id=0, multiple=4)
    p = mb.packed
    # inputs drop each sequence's last token; 3 + 2 = 5 real tokens, padded to 8 by a pad sequence
    assert p.input_ids.tolist() == [[5, 6, 7, 9, 10, 0, 0, 0]]
    assert p.position_ids.tolist() == [[0, 1, 2, 0, 1, 0, 1, 2]]
    assert p.cu_seqlens.tolist() == [0, 3, 5, 8] and p.cu_seqlens.dtype == torch.int32
    assert (p.max_len, p.uniform_len, p.num_tokens, p.num_seqs) == (3, 0, 8, 3)
    # the loss still sees one padded row per sequence, exactly as collate makes it
    ref = collate([a, b], pad_id=0)
    for name in ("targets", "mask", "advantages", "rollout_logp", "input_ids"):
        assert torch.equal(getattr(mb, name), getattr(ref, name)), name
    assert ref.targets.tolist() == [[6, 7, IGNORE], [IGNORE, 11, IGNORE]]
    # scored: a@0 (6), a@1 (7), b@1 (11): packed positions 0, 1, 4; padded [2, 3] flat 0, 1, 4
    assert mb.scoring.src.tolist() == [0, 1, 4]
    assert mb.scoring.dst.tolist() == [0, 1, 4]
    assert mb.scoring.targets.tolist() == [6, 7, 11]
    c = seq(6, index=2)
    mb2 = pack_micro_batch([a, c])  # rows [3, 5]: b's row width is 5 now
    assert mb2.scoring.dst.tolist() == [0, 1] + [5 + t for t in range(1, 5)]
    assert mb2.scoring.src.tolist() == [0, 1] + [3 + t for t in range(1, 5)]


def test_equal_lengths_are_uniform_and_unpadded():
    mb = pack_micro_batch([seq(9, index=i) for i in range(3)], multiple=8)
    assert mb.packed.uniform_len == 8 and mb.packed.cu_seqlens.tolist() == [0, 8, 16, 24]
    mb = pack_micro_batch([seq(9, index=i) for i in range(3)], multiple=16)  # pad sequence of 8
    assert mb.packed.uniform_len == 8 and mb.packed.num_seqs == 4
    mb = pack_micro_batch([seq(9), seq(8, index=1)], multiple=1)
    assert mb.packed.uniform_len == 0


def test_packed_micro_batches_cover_every_sequence_once_within_budget():
    seqs = [seq(n, index=i) for i, n in enumerate([9, 4, 17, 3, 8, 6, 12])]
    mbs = make_packed_micro_batches(seqs, budget=20, multiple=8)
    got = sorted(i for mb in mbs for i in mb.seq_index)
    assert got == list(range(7))
    for mb in mbs:
        real = sum(len(seqs[i].token_ids) - 1 for i in mb.seq_index)
        assert real <= 20 or len(mb.seq_index) == 1
        assert mb.packed.num_tokens % 8 == 0 and mb.packed.num_tokens - real < 8
        assert mb.num_tokens == mb.scoring.src.numel()
        # every scored packed position holds the token before its target
        flat = mb.packed.input_ids[0]
        for s, d, t in zip(mb.scoring.src, mb.scoring.dst, mb.scoring.targets):
            row, col = divmod(int(d), mb.shape[1])
            seq_ids = seqs[mb.seq_index[row]].token_ids
            assert int(flat[s]) == seq_ids[col] and int(t) == seq_ids[col + 1]
    assert len(mbs) == 3  # 52 tokens in bins of 20: 17+3, 12+8, 9+6+4


def test_moving_a_packed_batch_moves_everything():
    mb = pack_micro_batch([seq(5), seq(7, index=1)]).to(torch.device("cpu"))
    assert mb.packed.cu_seqlens.device.type == "cpu" and mb.scoring.src.device.type == "cpu"
