"""Memory admission replayed with the real DeviceBudget and batch feed (benchmarks/
admission_replay.py), sped up: large problems in a cluster hold up the light ones behind them in
strict FIFO and problem order; backfill with the batch order keeps the large ones running one
after another with light ones beside them. Wall-clock figures with margins: jitter is scaled."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data" / "kernelbench"
ROWS = REPO / "docs" / "bench" / "h200_kernelbench_self_before_weights.json"
sys.path.insert(0, str(REPO / "benchmarks"))

import admission_replay as ar  # noqa: E402


def test_clustered_large_problems_replayed() -> None:
    # level 1's shape: light problems, a cluster of large ones (one at a time), light ones
    jobs = [{"id": f"l{i}", "seconds": 4.0, "share": 0.03} for i in range(6)]
    jobs += [{"id": f"H{i}", "seconds": 2.0, "share": 0.75} for i in range(10)]
    jobs += [{"id": f"l{i}", "seconds": 4.0, "share": 0.03} for i in range(6, 24)]
    cap = 1 << 40
    fifo = ar.replay(jobs, cap, 4, "fifo_problem_order", scale=40)
    best = ar.replay(jobs, cap, 4, "backfill_batch_order", scale=40)
    # FIFO: 6 light (6 s) + the large ones serially (20 s) + 18 light after them (18 s) ~ 44 s;
    # the feed: large ones serially (20 s) beside three light at a time (24 x 4 / 3 = 32 s)
    assert best["makespan_s"] < 0.85 * fifo["makespan_s"], (best, fifo)
    assert best["first_starts"][:2] == ["H0", "H1"] and best["backfills"] > 0
    for r in (fifo, best):
        assert r["peak_reserved_share"] <= 1.0 and r["max_running"] <= 4
    assert best["max_in_flight"] == 5  # the one waiting for memory takes no worker


@pytest.mark.skipif(not DATA.is_dir() or not ROWS.is_file(), reason="no KernelBench data/rows")
def test_kernelbench_level1_replayed() -> None:
    jobs, cap, _ = ar.load_jobs(ROWS, [1])
    assert len(jobs) == 100
    fifo = ar.replay(jobs, cap, 4, "fifo_problem_order", scale=200)
    best = ar.replay(jobs, cap, 4, "backfill_batch_order", scale=200)
    bound = ar.bounds(jobs, 4)["work_over_workers_s"]
    assert best["makespan_s"] < 0.93 * fifo["makespan_s"], (best, fifo)
    assert best["makespan_s"] > bound  # a replay, not a miracle
    assert best["peak_reserved_share"] <= 1.0
