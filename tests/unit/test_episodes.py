"""Episode statistics: pass@turn1, pass@turn2 and repair rate computed by hand."""

from __future__ import annotations

import pytest

from tritonforge.jobs.episodes import EPISODE_KEYS, episode_stats
from tritonforge.types import Status, Trajectory, Turn, Verdict


def episode(*statuses: Status | None, reward: float = 0.0) -> Trajectory:
    turns = [
        Turn(
            index=i,
            prompt_len=0,
            response_ids=[1],
            response_logprobs=[0.0],
            response_text="",
            code=None,
            verdict=None if s is None else Verdict(status=s, compiled=s is Status.CORRECT),
            reward=0.3 if s is Status.CORRECT else 0.0,
            ret=reward if i == 0 else 0.0,
        )
        for i, s in enumerate(statuses)
    ]
    return make(turns)


def make(turns: list[Turn], status: str = "ok") -> Trajectory:
    return Trajectory(
        problem_id="p", prompt_ids=[], token_ids=[1], loss_mask=[1], rollout_logprobs=[0.0],
        turns=turns, status=status,
    )  # fmt: skip


C, W, S = Status.CORRECT, Status.NUMERICAL_MISMATCH, Status.SYNTAX_ERROR


def test_repair_rate_is_conditional_on_a_wrong_first_turn() -> None:
    trajs = [
        episode(C, reward=0.3),  # right away
        episode(W, C, reward=0.12),  # repaired
        episode(S, W),  # not repaired
        episode(W),  # wrong, no second turn (context limit): counts as not repaired
        make([], status="generation_failed"),  # no turns at all
    ]
    s = episode_stats(trajs)
    assert set(s) == set(EPISODE_KEYS)
    assert s["episodes"] == 5
    assert s["first_turn_pass"] == pytest.approx(1 / 5)
    assert s["pass_at_turn2"] == pytest.approx(2 / 5)
    assert s["pass_rate"] == pytest.approx(2 / 5)
    assert s["repair_attempts"] == 3 and s["repair_rate"] == pytest.approx(1 / 3)
    assert s["mean_reward"] == pytest.approx((0.3 + 0.12) / 5)
    assert s["compiled_rate"] == pytest.approx(2 / 5)


def test_pass_at_turn2_ignores_later_turns_and_no_failures_means_zero_repairs() -> None:
    s = episode_stats([episode(W, W, C), episode(C, C)])
    assert s["pass_rate"] == 1.0 and s["pass_at_turn2"] == 0.5
    assert s["repair_attempts"] == 1 and s["repair_rate"] == 0.0
    none = episode_stats([episode(C), episode(C)])
    assert none["repair_attempts"] == 0 and none["repair_rate"] == 0.0
    assert episode_stats([])["episodes"] == 0
