"""Per-turn returns: hand-computed discounted sums and the single-scalar trajectory modes."""

from __future__ import annotations

import pytest

from tritonforge.config import load_config
from tritonforge.rollout.returns import (
    RETURNS,
    ReturnsConfig,
    apply_returns,
    compute_returns,
    discounted_returns,
)
from tritonforge.types import Trajectory, Turn


def test_discounted_hand_computed() -> None:
    # rewards [0.1, 0.3, 1.3], gamma 0.4:
    # R_2 = 1.3
    # R_1 = 0.3 + 0.4 * 1.3   = 0.3 + 0.52  = 0.82
    # R_0 = 0.1 + 0.4 * 0.82  = 0.1 + 0.328 = 0.428
    assert discounted_returns([0.1, 0.3, 1.3], 0.4) == pytest.approx([0.428, 0.82, 1.3])
    assert compute_returns([0.1, 0.3, 1.3]) == pytest.approx([0.428, 0.82, 1.3])  # default mode


def test_discounted_gamma_edges() -> None:
    assert discounted_returns([0.1, 0.3, 1.3], 0.0) == pytest.approx([0.1, 0.3, 1.3])
    # gamma 1: suffix sums 1.7, 1.6, 1.3
    assert discounted_returns([0.1, 0.3, 1.3], 1.0) == pytest.approx([1.7, 1.6, 1.3])
    assert discounted_returns([], 0.4) == []


def test_trajectory_modes() -> None:
    rewards = [0.1, 1.3, 0.3]
    assert compute_returns(rewards, "trajectory_last") == pytest.approx([0.3, 0.3, 0.3])
    assert compute_returns(rewards, "trajectory_max") == pytest.approx([1.3, 1.3, 1.3])
    # R_0 = 0.1 + 0.4 * 1.3 + 0.16 * 0.3 = 0.1 + 0.52 + 0.048 = 0.668
    cfg = ReturnsConfig(type="trajectory_discounted", gamma=0.4)
    assert compute_returns(rewards, cfg) == pytest.approx([0.668, 0.668, 0.668])
    for name in RETURNS:
        assert compute_returns([], name) == []


def test_gamma_override_and_unknown() -> None:
    assert compute_returns([1.0, 1.0], ReturnsConfig(gamma=0.4), gamma=0.5) == pytest.approx(
        [1.5, 1.0]
    )
    with pytest.raises(KeyError, match="known"):
        compute_returns([1.0], "nope")


def test_config_overrides() -> None:
    cfg = load_config(ReturnsConfig, overrides=["type=trajectory_max", "gamma=0.9"])
    assert (cfg.type, cfg.gamma) == ("trajectory_max", 0.9)


def test_apply_returns_sets_turns() -> None:
    turns = [
        Turn(
            index=i,
            prompt_len=0,
            response_ids=[],
            response_logprobs=[],
            response_text="",
            code=None,
            reward=r,
        )
        for i, r in enumerate([0.1, 0.3, 1.3])
    ]
    traj = Trajectory(
        problem_id="p", prompt_ids=[], token_ids=[], loss_mask=[], rollout_logprobs=[], turns=turns
    )
    out = apply_returns(traj)
    assert out is traj
    assert traj.returns == pytest.approx([0.428, 0.82, 1.3])
    assert traj.rewards == [0.1, 0.3, 1.3]  # raw rewards untouched
