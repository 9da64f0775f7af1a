"""Batch order: memory-heavy jobs kept apart with light ones beside them, within `workers` (+1
waiting for memory); nothing heavy leaves the order alone; estimates on the meta device."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.batch_order import (
    Feed,
    device_share,
    estimate_shares,
    is_heavy,
    run_jobs,
    shares_for,
)

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "kernelbench"
H200_BUDGET = (
    135098892288  # 0.9 of an H200's memory (docs/bench/h200_kernelbench_self_before_weights.json)
)


def _walk(feed: Feed) -> list[tuple[int, list[int], int, float]]:
    """Dry run, jobs finishing in start order: (started, heavy in flight, lights, light share)
    after each start."""
    seen, flight = [], []
    while len(feed) or flight:
        i = feed.next()
        if i is None:
            feed.done(flight.pop(0))
            continue
        flight.append(i)
        seen.append((i, list(feed.heavy_in_flight), feed.light_in_flight, feed.light_share))
    return seen


def test_nothing_heavy_keeps_the_order_and_the_workers() -> None:
    shares = [0.1, None, 0.2, 0.0, 0.05, 0.24, None, 0.1]
    assert Feed(shares, 4).order() == list(range(8))
    assert all(lights <= 4 and not h for _, h, lights, _ in _walk(Feed(shares, 4)))
    assert Feed([None] * 5, 1).order() == list(range(5))


def test_heavy_is_relative_to_the_workers() -> None:
    assert is_heavy(0.3, 4) and not is_heavy(0.3, 3) and not is_heavy(None, 8)
    assert not is_heavy(0.25, 4)  # four of them fit together


def test_a_cluster_of_heavy_jobs_is_spread_among_light_ones() -> None:
    # problem order as in KernelBench level 1: light, a cluster of large ones, light
    shares = [0.02] * 6 + [0.7] * 6 + [0.02] * 12
    walk = _walk(Feed(shares, 4))
    order = [i for i, *_ in walk]
    assert sorted(order) == list(range(24))
    assert order[:2] == [6, 7]  # one large problem runs, the next waits for memory
    assert order[2:5] == [0, 1, 2]  # three light ones beside them
    heavy_starts = [k for k, i in enumerate(order) if shares[i] > 0.5]
    gaps = [b - a for a, b in itertools.pairwise(heavy_starts)]
    assert max(gaps) <= 4  # spread out, not left to the end
    assert [i for i in order if shares[i] < 0.5] == [*range(6), *range(12, 24)]  # in order
    for _, heavies, lights, _ in walk:
        assert len(heavies) <= 2  # one running, one queued at admission
        running = lights + min(1, len(heavies))  # the queued one holds no memory
        assert running <= 4 and lights + len(heavies) <= 5


def test_heavy_jobs_that_fit_together_run_together() -> None:
    walk = _walk(Feed([0.4] * 6 + [0.01] * 6, 4))
    # two fit together (0.8), a third waits: three heavy in flight, two of them running
    assert walk[2][1] == [0, 1, 2]
    assert max(len(h) for _, h, _, _ in walk) == 3


def test_light_jobs_leave_room_for_the_heavy_chain() -> None:
    # beside a 0.7 job, lights may hold 0.3: one of 0.2, then only the tiny ones
    shares = [0.7, 0.7, 0.2, 0.2, 0.01, 0.01]
    walk = _walk(Feed(shares, 4))
    assert [i for i, *_ in walk[:4]] == [0, 1, 2, 4]  # 3 (0.2) passed by 4 (0.01): first fit
    for _, heavies, _, light_share in walk:
        if heavies:
            assert light_share + 0.7 <= 1.0 + 1e-9
    # nothing in flight: a job too large for any room still starts (admission refuses it)
    assert Feed([1.5, 0.9], 4).next() == 0


def test_unknown_shares_are_light() -> None:
    assert Feed([None, 0.9, None], 4).order() == [1, 0, 2]


def test_run_jobs_bounds_the_pool_and_reports_each_index() -> None:
    lock = threading.Lock()
    now, peak = [0], [0]
    got: dict[int, str] = {}

    def job(x: str) -> str:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        time.sleep(0.01)
        with lock:
            now[0] -= 1
        return x.upper()

    jobs = [f"j{i}" for i in range(12)]
    n = run_jobs(job, jobs, None, 3, lambda i, j, r: got.__setitem__(i, r))
    assert n == 12 and got == {i: f"J{i}" for i in range(12)} and peak[0] <= 3
    # heavy ones: one more in flight (the one waiting for memory), never more
    now[0], peak[0] = 0, 0
    shares = [0.8] * 6 + [0.01] * 6
    assert run_jobs(job, jobs, shares, 3, lambda i, j, r: None) == 12
    assert 3 <= peak[0] <= 4


def test_run_jobs_starts_nothing_after_the_deadline() -> None:
    started: list[int] = []
    done = run_jobs(
        lambda i: started.append(i) or time.sleep(0.05),
        list(range(10)),
        None,
        2,
        lambda i, j, r: None,
        deadline=time.monotonic() + 0.02,
    )
    assert done == len(started) == 2


def test_estimates_on_the_meta_device() -> None:
    src = device_share_src(1 << 28)
    share = device_share(src, 100 << 30, 1 << 30)  # 1 GiB in, 1 GiB out: ~15 GiB per evaluation
    assert share is not None and 0.1 < share < 0.25
    assert device_share("raise RuntimeError('no')", 100 << 30, 0) is None  # counted light
    assert estimate_shares([src, src], 1 << 62, 0) == [None, None]  # no budget: nothing heavy
    # under evaluation settings: the CPU has a budget only when one is set
    assert shares_for([src], EvalSettings(device="cpu"), "cpu") == [None]
    share = shares_for([src], EvalSettings(device="cpu", device_memory_gib=100), "cpu")[0]
    assert share is not None and 0.1 < share < 0.25  # no worker context on the CPU


@pytest.mark.skipif(not DATA.is_dir(), reason=f"no KernelBench data in {DATA}")
def test_kernelbench_level1_order_on_an_h200_budget() -> None:
    from tritonforge.problems.kernelbench import load_kernelbench_original

    problems = sorted(load_kernelbench_original(None, [1]), key=lambda p: p.problem_id)
    shares = estimate_shares([p.reference_src for p in problems], H200_BUDGET, 1 << 30)
    big = {p.problem_id for p, s in zip(problems, shares, strict=True) if s and s > 0.5}
    assert set(range(19, 33)) <= big and len(big) >= 25  # the clusters of 75-100 GiB problems
    order = [problems[i].problem_id for i in Feed(shares, 4).order()]
    assert sorted(order) == list(range(1, 101))
    heavy = {p.problem_id for p, s in zip(problems, shares, strict=True) if is_heavy(s, 4)}
    starts = [k for k, pid in enumerate(order) if pid in heavy]
    # heavy problems start from the beginning, a few places apart (in problem order 19..39
    # come in a row and light ones wait behind them), and each large one beside light ones
    assert starts[0] == 0 and max(b - a for a, b in itertools.pairwise(starts)) <= 5
    big_at = [k for k, pid in enumerate(order) if pid in big]
    assert big_at[len(big_at) // 2] < 60
    assert all(order[k - 1] not in big or order[k + 1] not in big for k in big_at[:10])


class _Judge:
    """Stands in for the Evaluator in eval-dir's loop (its order, not its verdicts, is tested):
    large problems take longer, so verdicts finish out of file order."""

    def __init__(self, settings: EvalSettings):
        self.settings = settings
        self.started: list[str] = []

    def evaluate(self, problem, source: str):
        from tritonforge.types import Status, Verdict

        self.started.append(problem.name)
        time.sleep(0.03 if problem.name.startswith("big") else 0.005)
        return Verdict(status=Status.CORRECT, problem_id=problem.id, message=source)


def test_eval_dir_starts_large_problems_apart_and_reports_in_file_order(tmp_path: Path) -> None:
    import io

    from tritonforge.commands.eval_dir import judge_pairs
    from tritonforge.types import Problem

    big = device_share_src(1 << 28)  # ~15 GiB per evaluation: heavy on a 20 GiB budget
    small = device_share_src(1 << 10)
    pairs = []
    for i, src in enumerate([small, small, big, big, big, small, small, small]):
        name = f"{'big' if src is big else 'small'}{i}"
        p = Problem(id=f"t/{name}", suite="t", name=name, reference_src=src)
        f = tmp_path / f"{name}.py"
        f.write_text(name)
        pairs.append((p, f))
    judge = _Judge(EvalSettings(device="cpu", device_memory_gib=20))
    log = io.StringIO()
    verdicts = judge_pairs(judge, pairs, 2, log)  # type: ignore[arg-type]
    assert [v.message for v in verdicts] == [f.stem for _, f in pairs]  # file order
    # one large problem runs, one is queued at admission, a light one beside them (threads:
    # the three start in any order)
    assert set(judge.started[:3]) == {"big2", "big3", "small0"}
    assert len(log.getvalue().splitlines()) == 8


def device_share_src(n: int) -> str:
    """A reference of `n` fp32 elements in and out."""
    return (
        "import torch\nclass Model(torch.nn.Module):\n"
        "    def forward(self, x):\n        return x * 2\n"
        f"def get_inputs():\n    return [torch.randn({n})]\n"
        "def get_init_inputs():\n    return []\n"
    )
