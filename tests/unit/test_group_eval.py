"""Rollouts' grouping of evaluations (rollout/group_eval.py): calls for one problem under the
same settings that arrive together become one evaluate_group; other problems or settings, or
a backend without groups, are judged one by one; every caller gets its own verdict; a backend
error reaches every caller of the group. With a stand-in backend (no judging here)."""

from __future__ import annotations

import asyncio

import pytest

from tritonforge.config.eval import EvalSettings
from tritonforge.rollout.group_eval import GroupedBackend
from tritonforge.types import Problem, Status, Verdict


def _problem(name: str) -> Problem:
    return Problem(id=f"t/{name}", suite="t", name=name, reference_src=f"# {name}")


class Backend:
    def __init__(self, groups: bool = True) -> None:
        self.groups: list[list[str]] = []
        self.singles: list[str] = []
        self.fail = False
        if not groups:
            self.evaluate_group = None  # type: ignore[assignment]

    async def evaluate(self, problem, source, settings=None):
        self.singles.append(source)
        return Verdict(status=Status.CORRECT, problem_id=problem.id, message=source)

    async def evaluate_group(self, problem, sources, settings=None):
        if self.fail:
            raise RuntimeError("server gone")
        self.groups.append(list(sources))
        return [Verdict(status=Status.CORRECT, problem_id=problem.id, message=s) for s in sources]

    async def aclose(self) -> None:
        return None


def test_calls_that_arrive_together_are_one_group() -> None:
    inner = Backend()
    grouped = GroupedBackend(inner, window_s=0.05)
    a, b = _problem("a"), _problem("b")
    strict, hybrid = EvalSettings(), EvalSettings(mode="hybrid")

    async def main() -> list[Verdict]:
        return await asyncio.gather(
            grouped.evaluate(a, "a1", strict),
            grouped.evaluate(a, "a2", strict),
            grouped.evaluate(b, "b1", strict),
            grouped.evaluate(a, "a3", strict),
            grouped.evaluate(a, "a4", hybrid),
        )

    verdicts = asyncio.run(main())
    assert [v.message for v in verdicts] == ["a1", "a2", "b1", "a3", "a4"]
    assert inner.groups == [["a1", "a2", "a3"]]
    assert sorted(inner.singles) == ["a4", "b1"]  # groups of one go one by one
    assert sorted(grouped.sent) == [1, 1, 3]


def test_a_backend_without_groups_and_a_failing_one() -> None:
    inner = Backend(groups=False)
    grouped = GroupedBackend(inner, window_s=0.01)
    a = _problem("a")

    async def two() -> list[Verdict]:
        return await asyncio.gather(grouped.evaluate(a, "x"), grouped.evaluate(a, "y"))

    assert [v.message for v in asyncio.run(two())] == ["x", "y"]
    assert sorted(inner.singles) == ["x", "y"]
    failing = Backend()
    failing.fail = True
    grouped = GroupedBackend(failing, window_s=0.01)

    async def both_fail() -> None:
        results = await asyncio.gather(
            grouped.evaluate(a, "x"), grouped.evaluate(a, "y"), return_exceptions=True
        )
        assert all(isinstance(r, RuntimeError) for r in results)

    asyncio.run(both_fail())


def test_a_full_group_goes_at_once() -> None:
    inner = Backend()
    grouped = GroupedBackend(inner, window_s=60.0, max_group=2)

    async def main() -> None:
        await asyncio.wait_for(
            asyncio.gather(
                grouped.evaluate(_problem("a"), "1"), grouped.evaluate(_problem("a"), "2")
            ),
            timeout=5.0,
        )

    asyncio.run(main())
    assert inner.groups == [["1", "2"]]


@pytest.mark.parametrize("window", [0.0])
def test_no_window_still_answers(window: float) -> None:
    grouped = GroupedBackend(Backend(), window_s=window)
    v = asyncio.run(grouped.evaluate(_problem("a"), "z"))
    assert v.message == "z"


def test_a_batch_of_one_problem_shares_a_timing_group() -> None:
    """The service's /v1/eval/batch: jobs of one problem under one set of settings share a
    TimingGroup; a mixed batch is judged as separate evaluations."""
    from tritonforge.evaluation.service.service import Job, group_jobs

    a, b = _problem("a"), _problem("b")
    same = [Job(a, "x", EvalSettings(), 0.0), Job(a, "y", EvalSettings(), 0.0)]
    group_jobs(same)
    assert same[0].group is not None and same[0].group is same[1].group
    mixed = [Job(a, "x", EvalSettings(), 0.0), Job(b, "y", EvalSettings(), 0.0)]
    group_jobs(mixed)
    assert all(j.group is None for j in mixed)
    other = [Job(a, "x", EvalSettings(), 0.0), Job(a, "y", EvalSettings(mode="hybrid"), 0.0)]
    group_jobs(other)
    assert all(j.group is None for j in other)
