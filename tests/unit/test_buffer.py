"""Rollout buffer: stages by name, hand-computed normalisation, retry cap, stats, file round trips."""

from __future__ import annotations

import math

import pytest

from helpers.trajectories import group, make_traj
from tritonforge.rollout.buffer import BufferConfig, RolloutBuffer, load_groups, save_groups
from tritonforge.rollout.buffer_stages import (
    NORMALIZERS,
    is_zero_variance,
    token_advantages,
    token_turn_index,
)
from tritonforge.types import Group, Mismatch, Status, Timing, Verdict

Z1 = 1 / math.sqrt(1.25)  # population std of [1, 2, 3, 4] is sqrt(1.25)


def test_token_turn_index_and_broadcast() -> None:
    traj = make_traj([0.5, 1.0])
    # tokens: [1 2 3 | 10 20 | 7 7 | 11 21 | 7 7]
    assert token_turn_index(traj) == [-1, -1, -1, 0, 0, -1, -1, 1, 1, -1, -1]
    assert token_advantages(traj, [2.0, -3.0]) == [0, 0, 0, 2.0, 2.0, 0, 0, -3.0, -3.0, 0, 0]


def test_zscore_hand_computed() -> None:
    # R = [1, 2, 3, 4]: mean 2.5, population variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25
    # z = (R - 2.5) / sqrt(1.25) = [-1.5, -0.5, 0.5, 1.5] / 1.118034 = [-1.341641, -0.447214, ...]
    out = NORMALIZERS["zscore"]([[1.0], [2.0], [3.0], [4.0]], 0.0)
    assert [x[0] for x in out] == pytest.approx([-1.5 * Z1, -0.5 * Z1, 0.5 * Z1, 1.5 * Z1])
    assert out[0][0] == pytest.approx(-1.341641, abs=1e-6)


def test_per_turn_normalisation_ragged_group() -> None:
    # A = [1, 2], B = [3], C = [2, 4]
    # turn 0: [1, 3, 2] mean 2, std sqrt(2/3) = 0.816497 -> z = [-1.224745, 1.224745, 0]
    # turn 1: [2, 4]    mean 3, std 1                 -> z = [-1, 1]
    out = NORMALIZERS["zscore"]([[1.0, 2.0], [3.0], [2.0, 4.0]], 0.0)
    assert out[0] == pytest.approx([-1.224745, -1.0], abs=1e-6)
    assert out[1] == pytest.approx([1.224745], abs=1e-6)
    assert out[2] == pytest.approx([0.0, 1.0], abs=1e-6)
    mean_only = NORMALIZERS["mean_only"]([[1.0, 2.0], [3.0], [2.0, 4.0]], 0.0)
    assert mean_only == [[-1.0, -1.0], [1.0], [0.0, 1.0]]
    assert NORMALIZERS["none"]([[1.0, 2.0]], 0.0) == [[1.0, 2.0]]


def test_one_failure_in_a_group_hand_computed() -> None:
    """Issue 15's candidate "normalisation when a group has one failure", ruled in as a cause
    only together with Adam (docs/benchmarks.md): three correct (0.3) and one failed (0.0)
    first turns. mean 0.225, population std sqrt(3 * 0.075^2 + 0.225^2) / 2 = 0.129904, so the
    failure gets -0.225 / 0.129904 = -sqrt(3) and each correct answer +1/sqrt(3); the sum is 0.
    The scale does not depend on the reward gap: a 0.01 gap gives the same advantages. The
    failure's second turn (the only turn-2 sample) gets 0 from its own column, and its first
    turn keeps its turn-0 advantage whether or not the repair worked (the return carries it)."""
    out = NORMALIZERS["zscore"]([[0.3], [0.3], [0.3], [0.0, 0.3]], 1e-6)
    root3 = math.sqrt(3)
    assert [r[0] for r in out] == pytest.approx([1 / root3] * 3 + [-root3], abs=1e-4)
    assert sum(r[0] for r in out) == pytest.approx(0.0, abs=1e-9)
    assert out[3][1] == 0.0
    small = NORMALIZERS["zscore"]([[0.01], [0.01], [0.01], [0.0]], 1e-6)
    assert [r[0] for r in small] == pytest.approx([r[0] for r in out], abs=1e-3)
    # the buffer puts the turn's value on that turn's response tokens only
    buf = RolloutBuffer(BufferConfig(group_size=4))
    kept = buf.add("p", group([[0.3], [0.3], [0.3], [0.0, 0.3]]), policy_version=3).group
    assert kept is not None
    failed = kept.trajectories[3]
    assert failed.advantages[3:5] == pytest.approx([-root3] * 2, abs=1e-4)
    assert failed.advantages[7:9] == [0.0, 0.0] and set(failed.advantages[:3]) == {0.0}


def test_buffer_sets_raw_and_normalised_side_by_side() -> None:
    buf = RolloutBuffer(BufferConfig(group_size=3, epsilon=0.0))
    out = buf.add("p", group([[1.0, 2.0], [3.0], [2.0, 4.0]]), policy_version=3)
    assert out.accepted and out.group is not None
    a = out.group.trajectories[0]
    assert a.returns == [1.0, 2.0]  # raw returns kept in the turns
    assert a.meta["norm_returns"] == pytest.approx([-1.224745, -1.0], abs=1e-6)
    assert (a.raw_reward, a.norm_reward) == (1.0, pytest.approx(-1.224745, abs=1e-6))
    assert a.advantages == pytest.approx(
        [0, 0, 0, -1.224745, -1.224745, 0, 0, -1.0, -1.0, 0, 0], abs=1e-6
    )
    assert (
        a.policy_version == 3 and a.rollout_logprobs[3] == -0.5 and a.group_id == out.group.group_id
    )


def test_no_reward_range_filter() -> None:
    # rewards above 1 (a correct kernel faster than 1.7x gets 0.3 + 0.7 = 1.0 and more) are kept
    buf = RolloutBuffer(BufferConfig(group_size=2, filter="drop_zero_variance"))
    out = buf.add("p", group([[2.3], [0.1]]))
    assert out.accepted
    assert [t.raw_reward for t in out.group.trajectories] == [2.3, 0.1]


def test_all_valid_and_allow_partial() -> None:
    trajs = group([[1.0], [0.0], [0.5], [0.2]])
    trajs[1].status = "generation_failed"
    strict = RolloutBuffer(BufferConfig(group_size=4, max_regenerations=0))
    out = strict.add("p", [t.model_copy(deep=True) for t in trajs])
    assert (out.accepted, out.reason, out.regenerate) == (False, "invalid_samples", False)
    assert strict.add("p", group([[1.0], [0.0]])).reason == "incomplete"

    partial = RolloutBuffer(BufferConfig(group_size=4, validity="allow_partial", min_group_size=3))
    out = partial.add("p", [t.model_copy(deep=True) for t in trajs])
    assert out.accepted and len(out.group.trajectories) == 3  # the failed sample is dropped
    few = group([[1.0], [0.0], [0.5], [0.2]])
    for t in few[1:3]:
        t.status = "generation_failed"
    assert partial.add("p", few).reason == "too_few_valid"


def test_padding_duplicates_with_zero_advantage() -> None:
    trajs = group([[1.0], [0.0], [0.5], [0.2]])
    trajs[3].status = "generation_failed"
    cfg = BufferConfig(
        group_size=4, validity="allow_partial", min_group_size=2, padding="duplicate"
    )
    out = RolloutBuffer(cfg).add("p", trajs)
    ts = out.group.trajectories
    assert len(ts) == 4
    pad = ts[3]
    assert pad.meta["padded"] is True and pad.meta["padded_from"] == 0 and pad.sample_index == 3
    assert pad.advantages == [0.0] * len(pad.token_ids) and pad.norm_reward == 0.0
    assert pad.loss_mask == ts[0].loss_mask and pad.token_ids == ts[0].token_ids
    assert ts[0].advantages[3] != 0.0  # the original keeps its advantage
    cfg_m = cfg.model_copy(update={"padding": "duplicate_masked"})
    trajs2 = group([[1.0], [0.0], [0.5]])
    masked = RolloutBuffer(cfg_m).add("p", trajs2).group.trajectories[3]
    assert masked.loss_mask == [0] * len(masked.token_ids)


def test_zero_variance_drop_with_retry_cap() -> None:
    cfg = BufferConfig(group_size=2, filter="drop_zero_variance", max_regenerations=2)
    buf = RolloutBuffer(cfg)
    outs = [buf.add("p", group([[0.1, 0.3], [0.1, 0.3]])) for _ in range(3)]
    assert [(o.accepted, o.reason, o.regenerate) for o in outs] == [
        (False, "zero_variance", True),
        (False, "zero_variance", True),
        (False, "zero_variance", False),  # cap reached: dropped for good
    ]
    assert buf.regenerations("p") == 2 and len(buf) == 0
    # another problem has its own cap; a group with variance is accepted
    assert buf.add("q", group([[0.0], [0.0]], pid="q")).regenerate
    assert buf.add("p", group([[0.0], [1.0]])).accepted
    s = buf.stats()
    assert s["dropped_zero_variance"] == 3 and s["dropped_zero_variance_exhausted"] == 1
    assert s["regenerations_requested"] == 3 and s["groups_seen"] == 5 and s["groups_accepted"] == 1
    assert s["zero_variance_rate"] == pytest.approx(4 / 5)

    keep = RolloutBuffer(cfg.model_copy(update={"max_regenerations": 0, "on_exhausted": "keep"}))
    out = keep.add("p", group([[0.5], [0.5]]))
    assert out.accepted and all(a == 0.0 for t in out.group.trajectories for a in t.advantages)
    assert keep.stats()["groups_kept_after_cap"] == 1


def test_zero_variance_is_per_turn() -> None:
    assert is_zero_variance(group([[1.0, 2.0], [1.0, 2.0], [1.0]]))
    assert not is_zero_variance(group([[1.0, 2.0], [1.0, 3.0]]))  # turn 0 equal, turn 1 differs


def _v(status: Status, speedup: float | None = None) -> Verdict:
    return Verdict(status=status, correct=status is Status.CORRECT, speedup=speedup)


def test_group_stats_pass_rate_and_fast_p() -> None:
    c, w = Status.CORRECT, Status.NUMERICAL_MISMATCH
    trajs = [
        make_traj([1.0], 0, verdicts=[_v(c, 1.5)]),  # correct at turn 0, 1.5x
        make_traj([0.3], 1, verdicts=[_v(c, 0.8)]),  # correct at turn 0, slower
        make_traj([0.1, 2.0], 2, verdicts=[_v(w), _v(c, 2.5)]),  # fixed at turn 1, 2.5x
        make_traj([0.1, 0.1], 3, verdicts=[_v(w), _v(w)]),  # never correct
    ]
    cfg = BufferConfig(group_size=4, fast_p_thresholds=[0.0, 1.0, 2.0])
    s = RolloutBuffer(cfg).add("p", trajs).stats
    assert s["pass_rate"] == 0.75  # 3 of 4 samples correct at some turn
    assert s["first_turn_pass_rate"] == 0.5  # 2 of 4 correct at turn 0
    assert (s["fast_0"], s["fast_1"], s["fast_2"]) == (0.75, 0.5, 0.25)  # speedup > p
    # R_0 = [1.0, 0.3, 0.1, 0.1]: mean 0.375, max 1.0
    assert s["reward_mean"] == pytest.approx(0.375) and s["reward_max"] == 1.0
    assert s["best_reward_mean"] == pytest.approx((1.0 + 0.3 + 2.0 + 0.1) / 4)
    assert s["turns_mean"] == 1.5 and s["zero_variance"] == 0.0


def test_unknown_stage_name() -> None:
    with pytest.raises(KeyError, match="normalize"):
        RolloutBuffer(BufferConfig(normalize="rank"))


def test_pop_groups_fifo() -> None:
    buf = RolloutBuffer(BufferConfig(group_size=2))
    for pid in ("a", "b", "c"):
        buf.add(pid, group([[0.0], [1.0]], pid=pid))
    assert [g.problem_id for g in buf.pop_groups(2)] == ["a", "b"]
    assert len(buf) == 1 and buf.stats()["groups_held"] == 1


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_save_load_round_trip(tmp_path, suffix: str) -> None:
    m = Mismatch(trial=1, distribution="native", max_abs_diff=0.25, worst_index=[0, 1])
    t = Timing(median_ms=1.5, mean_ms=1.6, std_ms=0.1, min_ms=1.4, max_ms=1.9, trials=10)
    trajs = [
        make_traj(
            [0.1, 1.3],
            0,
            verdicts=[
                _v(Status.NUMERICAL_MISMATCH).model_copy(update={"mismatch": m}),
                _v(Status.CORRECT, 2.0).model_copy(update={"runtime": t}),
            ],
        ),
        make_traj([0.0], 1, verdicts=[_v(Status.COMPILE_ERROR)]),
    ]
    buf = RolloutBuffer(BufferConfig(group_size=2))
    buf.add("p", trajs, policy_version=3, group_id="g1")
    buf.add("q", group([[0.0], [1.0]], pid="q"), policy_version=4)
    path = buf.save(tmp_path / f"buf{suffix}")
    loaded = RolloutBuffer.load(path)
    assert loaded.groups == buf.groups  # every field, including verdicts and advantages
    g = loaded.groups[0]
    assert g.trajectories[0].turns[0].verdict.mismatch.worst_index == [0, 1]
    assert g.trajectories[0].turns[1].verdict.status is Status.CORRECT


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_nan_survives_files(tmp_path, suffix: str) -> None:
    v = _v(Status.NUMERICAL_MISMATCH).model_copy(
        update={"mismatch": Mismatch(trial=0, distribution="native", max_abs_diff=float("nan"))}
    )
    g = Group(
        group_id="g",
        problem_id="p",
        policy_version=0,
        trajectories=[make_traj([0.1], verdicts=[v])],
    )
    (back,) = load_groups(save_groups([g], tmp_path / f"nan{suffix}"))
    assert math.isnan(back.trajectories[0].turns[0].verdict.mismatch.max_abs_diff)


def test_unknown_file_type(tmp_path) -> None:
    with pytest.raises(ValueError, match="jsonl"):
        save_groups([], tmp_path / "x.csv")
