"""Micro-batching under a token budget: packing by hand, alignment, counts, sharding, splits."""

from __future__ import annotations

import pytest
import torch

from tritonforge.config.train import BatchConfig
from tritonforge.training.batching import (
    IGNORE,
    MicroBatch,
    TrainSequence,
    collate,
    count_tokens,
    make_micro_batches,
    plan_micro_batches,
    prepare_sequences,
    shard_by_rank,
    split_minibatches,
)
from tritonforge.types import Trajectory, Turn


def seq(n: int, prompt: int = 2, index: int = 0, adv: float = 1.0) -> TrainSequence:
    ids = list(range(10, 10 + n))
    mask = [0] * prompt + [1] * (n - prompt)
    return TrainSequence(ids, mask, [adv * m for m in mask], [-0.5 * m for m in mask], 0, index)


def test_plan_by_hand():
    # input lengths 8, 7, 5, 3, 2 under 16 padded tokens: [8, 7] (2 x 8 = 16), then [5, 3, 2]
    # (3 x 5 = 15; adding nothing else); original indices are returned
    lengths = [5, 3, 8, 2, 7]
    assert plan_micro_batches(lengths, 16) == [[2, 4], [0, 1, 3]]
    # a sequence longer than the budget is alone
    assert plan_micro_batches([20, 3, 3], 16) == [[0], [1, 2]]
    # budget 1 row each
    assert plan_micro_batches([4, 4], 4) == [[0], [1]]


def test_collate_shifts_targets_and_aligns_per_token_values():
    a = TrainSequence([5, 6, 7, 8], [0, 1, 1, 0], [0.0, 2.0, 3.0, 0.0], [0.0, -1.0, -2.0, 0.0])
    b = TrainSequence([9, 10, 11], [0, 0, 1], [0.0, 0.0, 4.0], [0.0, 0.0, -3.0], index=1)
    mb = collate([a, b], pad_id=0)
    # position t predicts token t+1; inputs drop the last token
    assert mb.input_ids.tolist() == [[5, 6, 7], [9, 10, 0]]
    assert mb.attention_mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert mb.targets.tolist() == [[6, 7, IGNORE], [IGNORE, 11, IGNORE]]
    assert mb.mask.tolist() == [[1, 1, 0], [0, 1, 0]]
    assert mb.advantages.tolist() == [[2.0, 3.0, 0.0], [0.0, 4.0, 0.0]]
    assert mb.rollout_logp.tolist() == [[-1.0, -2.0, 0.0], [0.0, -3.0, 0.0]]
    assert (mb.num_tokens, mb.num_seqs, mb.real_tokens, mb.seq_index) == (3, 2, 5, [0, 1])


def test_make_micro_batches_respects_budget_and_keeps_sequences_whole():
    seqs = [seq(n, index=i) for i, n in enumerate([9, 4, 17, 3, 8, 6])]
    mbs = make_micro_batches(seqs, budget=16, pad_id=0)
    rows = sorted(i for mb in mbs for i in mb.seq_index)
    assert rows == list(range(6))  # every sequence exactly once
    for mb in mbs:
        b, length = mb.shape
        assert b * length <= 16 or b == 1
        for r, i in enumerate(mb.seq_index):  # a row holds one whole sequence
            n = len(seqs[i].token_ids) - 1
            assert mb.attention_mask[r].sum() == n
            assert mb.input_ids[r, :n].tolist() == seqs[i].token_ids[:-1]
    assert [mb.seq_index for mb in mbs] == [[2], [0, 4], [5, 1, 3]]


def test_counts_for_global_normalisation():
    seqs = [seq(5, prompt=2), seq(4, prompt=4), seq(3, prompt=1)]
    # scored = mask of tokens 1..T-1: 3, 0 (all prompt), 2
    assert count_tokens(seqs) == (5, 2)


def test_prepare_truncates_drops_and_skips():
    seqs = [seq(10), seq(4, prompt=4), seq(6)]
    out, counts = prepare_sequences(seqs, BatchConfig(max_seq_len=8))
    assert [len(s.token_ids) for s in out] == [8, 6]
    assert [s.index for s in out] == [0, 2]
    assert counts == {"truncated": 1, "dropped_long": 0, "skipped_empty": 1}
    out, counts = prepare_sequences(seqs, BatchConfig(max_seq_len=8, overflow="drop"))
    assert [len(s.token_ids) for s in out] == [6] and counts["dropped_long"] == 1


def test_from_trajectory_and_length_checks():
    turn = Turn(index=0, prompt_len=2, response_ids=[3, 4], response_logprobs=[-1, -2],
                response_text="", code=None)  # fmt: skip
    traj = Trajectory(problem_id="p", prompt_ids=[1, 2], token_ids=[1, 2, 3, 4], loss_mask=[0, 0, 1, 1],
                      rollout_logprobs=[0, 0, -1, -2], advantages=[0, 0, 0.5, 0.5], turns=[turn],
                      policy_version=3)  # fmt: skip
    (s,), _ = prepare_sequences([traj], BatchConfig())
    assert s.token_ids == [1, 2, 3, 4] and s.policy_version == 3 and s.advantages[-1] == 0.5
    bad = TrainSequence([1, 2, 3], [0, 1])
    with pytest.raises(ValueError, match="loss_mask"):
        prepare_sequences([bad], BatchConfig())


def test_shard_by_rank_is_a_balanced_partition():
    seqs = [seq(n, index=i) for i, n in enumerate([10, 9, 8, 3, 2, 2, 1 + 2])]
    shards = [shard_by_rank(seqs, r, 2) for r in range(2)]
    got = sorted(s.index for sh in shards for s in sh)
    assert got == list(range(7))
    loads = [sum(len(s.token_ids) for s in sh) for sh in shards]
    assert abs(loads[0] - loads[1]) <= 10
    assert shard_by_rank(seqs, 0, 1) == seqs


def test_split_minibatches_exact_count_and_seeded():
    seqs = [seq(4, index=i) for i in range(5)]
    parts = split_minibatches(seqs, 2, shuffle=True, seed=3)
    assert len(parts) == 2 and sorted(s.index for p in parts for s in p) == list(range(5))
    assert parts == split_minibatches(seqs, 2, shuffle=True, seed=3)
    assert [len(p) for p in split_minibatches(seqs[:1], 3, False, 0)] == [1, 0, 0]


def test_dummy_micro_batch_scores_nothing():
    mb = MicroBatch.dummy(pad_id=7)
    assert mb.num_tokens == 0 and mb.mask.sum() == 0 and mb.seq_index == []
    assert mb.input_ids.tolist() == [[7, 7]]
    assert mb.to(torch.device("cpu")).targets.tolist() == [[7, 7]]


@pytest.mark.parametrize(
    "mask,scored",
    [([], 0), ([1], 0), ([1, 0, 1, 1], 2), ([0, 1.0, 0.0, 2, True, False], 3), ([0, 0, 0], 0)],
)
def test_num_scored_counts_the_nonzero_mask_after_the_first_token(mask, scored):
    s = TrainSequence(list(range(len(mask))), mask)
    assert s.num_scored == scored == sum(1 for m in mask[1:] if m)


def test_collate_finds_the_scored_positions_on_the_host():
    a = TrainSequence([5, 6, 7, 8], [0, 1, 1, 0])
    b = TrainSequence([9, 10, 11], [0, 0, 1], index=1)
    sc = collate([a, b], pad_id=0).scoring
    # [B, L] = [2, 3]: scored (0, 0), (0, 1), (1, 1)
    assert sc.src.tolist() == sc.dst.tolist() == [0, 1, 4]
    assert sc.targets.tolist() == [6, 7, 11]
    assert sc.src.data_ptr() != sc.dst.data_ptr()  # separate tensors, as of_padded makes


@pytest.mark.parametrize("packing", [True, False])
@pytest.mark.parametrize(
    "ids,mask,bad",
    [([1, 2, 512, 3], [0, 1, 1, 1], True),  # an input id past the vocabulary
     ([1, -2, 3, 4], [0, 0, 1, 1], True),  # a negative input id
     ([1, 2, 3, 600], [0, 1, 1, 1], True),  # the last token, scored
     ([1, 2, 3, -7], [0, 1, 1, 1], True),  # negative and scored: not "unscored"
     ([1, 2, 3, 600], [0, 1, 1, 0], False),  # the last token, unscored: never read
     ([0, 2, 511, 4], [0, 1, 1, 1], False)],
)  # fmt: skip
def test_the_trainer_refuses_ids_outside_the_vocabulary(tiny_core, packing, ids, mask, bad):
    """Checked on the host micro-batches (training.core.check_vocabulary): every id the device
    reads, named by its sequence; the vocabulary is 512."""
    tiny_core.policy.packing = packing
    good = TrainSequence([1, 2, 3, 4, 5], [0, 1, 1, 1, 1], index=0)
    seqs = [good, TrainSequence(ids, mask, index=1)]
    if bad:
        with pytest.raises(ValueError, match="sequence 1: a token id is outside the vocabulary"):
            tiny_core.micro_batches(seqs)
    else:
        assert sum(mb.num_tokens for mb in tiny_core.micro_batches(seqs)) == 4 + sum(mask[1:])


@pytest.fixture(scope="module")
def tiny_core():
    from helpers.train import tiny_lm
    from tritonforge.config.train import DistConfig, ModelConfig, OptimConfig
    from tritonforge.training.core import TrainCore

    core = TrainCore(
        ModelConfig(dtype="fp32"), OptimConfig(), BatchConfig(), DistConfig(), lm=tiny_lm()
    )
    packing = core.policy.packing
    yield core
    core.policy.packing = packing
