"""Speedup statistics and where they are shown: the bootstrap interval, the torch.compile reward
variant, summaries (speedup over torch.compile, judge faults counted apart) and the markdown
table of eval-dir."""

from __future__ import annotations

import functools
import random

import pytest

from tritonforge.evaluation.judge.summary import speedup_cell, summarize, to_markdown
from tritonforge.evaluation.judge.timing import bootstrap_ratio_ci
from tritonforge.rollout.rewards import REWARDS, compute_reward
from tritonforge.types import Status, Verdict


def test_bootstrap_interval_covers_the_ratio_and_shrinks_with_less_noise() -> None:
    rng = random.Random(0)
    base = [2.0 * (1 + rng.gauss(0, 0.05)) for _ in range(60)]
    cand = [1.0 * (1 + rng.gauss(0, 0.05)) for _ in range(60)]
    lo, hi = bootstrap_ratio_ci(base, cand, samples=2000)
    assert lo < 2.0 < hi and hi - lo < 0.2
    quiet_b = [2.0 * (1 + rng.gauss(0, 0.005)) for _ in range(60)]
    quiet_c = [1.0 * (1 + rng.gauss(0, 0.005)) for _ in range(60)]
    qlo, qhi = bootstrap_ratio_ci(quiet_b, quiet_c, samples=2000)
    assert qhi - qlo < (hi - lo) / 3
    assert bootstrap_ratio_ci(base, cand) == bootstrap_ratio_ci(base, cand)  # deterministic
    assert bootstrap_ratio_ci([1.0], cand) is None


def _correct(speedup: float | None, vs_compile: float | None) -> Verdict:
    return Verdict(
        status=Status.CORRECT, speedup=speedup, speedup_vs_compile=vs_compile, problem_id="p"
    )


def test_reward_on_the_speedup_over_torch_compile() -> None:
    assert "tritonforge_compile" in REWARDS
    v = _correct(3.0, 1.5)
    assert compute_reward(v, "tritonforge") == pytest.approx(2.3)
    assert compute_reward(v, "tritonforge_compile") == pytest.approx(0.8)
    assert compute_reward(_correct(3.0, None), "tritonforge_compile") == pytest.approx(0.3)
    wrong = Verdict(status=Status.NUMERICAL_MISMATCH)
    assert compute_reward(wrong, "tritonforge_compile") == pytest.approx(0.1)
    assert compute_reward(Verdict(status=Status.JUDGE_FAULT), "tritonforge_compile") == 0.0


def test_summary_shows_compile_speedups_and_counts_judge_faults_apart() -> None:
    a = _correct(2.0, 0.5)
    a.speedup_ci = [1.9, 2.1]
    b = _correct(0.5, 2.0)
    c = Verdict(status=Status.JUDGE_FAULT, problem_id="c", message="out of device memory")
    d = Verdict(status=Status.CRASH, problem_id="d")
    reward = functools.partial(compute_reward, name="tritonforge")
    s = summarize({"a": [a], "b": [b], "c": [c], "d": [d]}, ["a", "b", "c", "d"], reward)
    assert s["geomean_speedup"] == pytest.approx(1.0)
    assert s["geomean_speedup_vs_compile"] == pytest.approx(1.0)
    assert s["fast_1_vs_compile"] == pytest.approx(0.25)
    assert s["judge_faults"] == {"count": 1, "problems": ["c"]}
    assert "judge_fault" not in s["fault_histogram"] and s["fault_histogram"]["crash"] == 1
    assert not Status.JUDGE_FAULT.is_fault and Status.JUDGE_FAULT.is_judge_fault
    assert s["mean_reward"] == pytest.approx((1.3 + 0.3) / 4)
    md = to_markdown(s, [("a", a), ("b", b)], reward)
    assert "| a | correct | 2.000 (1.90-2.10) | 0.500 | 1.300 |" in md
    assert "vs torch.compile" in md and "judge_faults (not judged) | 1" in md


def test_speedup_cell() -> None:
    assert speedup_cell(None, None) == "n/a"
    assert speedup_cell(1.23456, None) == "1.235"
    assert speedup_cell(1.2, [1.1, 1.3]) == "1.200 (1.10-1.30)"


def test_short_line_shows_both_speedups() -> None:
    assert "speedup=2.00x vs_compile=0.50x" in _correct(2.0, 0.5).short()


@pytest.mark.parametrize("name", sorted(REWARDS))
def test_reward_is_finite_when_the_speedup_is_not(name: str) -> None:
    """A NaN speedup counts as not measured; an infinite one is capped or not measured."""
    unmeasured = compute_reward(_correct(None, None), name)
    assert compute_reward(_correct(float("nan"), float("nan")), name) == pytest.approx(unmeasured)
    infinite = compute_reward(_correct(float("inf"), float("inf")), name)
    assert infinite in (pytest.approx(unmeasured), pytest.approx(2.3), pytest.approx(3.3))
