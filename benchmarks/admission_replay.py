"""Replay of a KernelBench run's memory admission on the CPU, sped up, with the real scheduler code.

Each hybrid row of a kernelbench_self result (default: the H200 run of
docs/bench/h200_kernelbench_self_before_weights.json; --levels: one batch of all of them)
becomes a job that reserves its problem's estimated evaluation bytes (the meta-device estimate
of evaluation/batch_order.py, over the run's device budget) and holds them for the row's wall
less its admission wait, divided by --scale. The jobs go through the real
`DeviceBudget` (judge/admission.py) and the real `run_jobs` (evaluation/batch_order.py) under
four policies: strict FIFO or backfill, in problem order or in batch order. Written: each
policy's makespan and summed admission wait (scaled back to seconds), the most jobs running and
in flight, backfills, the peak reserved (never above the budget), the first starts, and two lower
bounds (all work over the workers; the problems of more than half the device one after another).

What it does not cover: the real evaluations' other contention (the timing gate, CPU, caches
trimmed), estimates that differ from the measured footprints, and the sleep jitter of this
machine (about a millisecond, times --scale).

    python benchmarks/admission_replay.py --levels 1 --out docs/bench/admission_replay_l1.json
    python benchmarks/admission_replay.py --levels 1,2 --scale 80 --out docs/bench/admission_replay_l12.json
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import bench_common as bc

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.batch_order import estimate_shares, is_heavy, run_jobs
from tritonforge.evaluation.judge.admission import DeviceBudget

BENCH = Path("docs/bench")
POLICIES = {  # name: (backfill, batch order)
    "fifo_problem_order": (False, False),
    "backfill_problem_order": (True, False),
    "fifo_batch_order": (False, True),
    "backfill_batch_order": (True, True),
}


def load_jobs(rows_path: Path, levels: list[int]) -> tuple[list[dict[str, Any]], int, list]:
    """(jobs in problem order: id, seconds, share), the device budget and the measured calls
    of the hybrid judgements ([wall, judgements] each)."""
    doc = json.loads(rows_path.read_text())
    cap = next(iter(doc["device_stats"].values()))["capacity"]
    rows = {r["problem"]: r for r in doc["rows"] if r["variant"] == "hybrid"}
    problems = [p for p in bc.kernelbench(levels, None, "original") if p.id in rows]
    ctx = EvalSettings().worker_context_mb << 20
    shares = estimate_shares([p.reference_src for p in problems], cap, ctx)
    jobs = []
    for p, share in zip(problems, shares, strict=True):
        r = rows[p.id]
        busy = r["wall"] - r["phases"].get("admission_wait", 0.0)
        jobs.append({"id": f"L{p.level}/{p.problem_id}", "seconds": busy, "share": share})
    calls = [[s["wall_s"], s["rows"]] for s in doc["sessions"] if s.get("variants") == ["hybrid"]]
    return jobs, cap, calls


def replay(
    jobs: list[dict[str, Any]], cap: int, workers: int, policy: str, scale: float
) -> dict[str, Any]:
    """Run the jobs through DeviceBudget + run_jobs under `policy`; figures in replayed seconds."""
    backfill, ordered = POLICIES[policy]
    budget = DeviceBudget("replay", cap, poll_s=0.25 / scale, backfill=backfill)
    lock = threading.Lock()
    state = {"running": 0, "max_running": 0, "in_flight": 0, "max_in_flight": 0, "wait": 0.0}
    starts: list[str] = []

    def one(job: dict[str, Any]) -> None:
        with lock:
            starts.append(job["id"])
            state["in_flight"] += 1
            state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
        with budget.reserve(int((job["share"] or 0.0) * cap)) as grant:
            with lock:
                state["running"] += 1
                state["max_running"] = max(state["max_running"], state["running"])
                state["wait"] += grant.waited * scale
            time.sleep(job["seconds"] / scale)
            with lock:
                state["running"] -= 1
                state["in_flight"] -= 1

    shares = [j["share"] for j in jobs] if ordered else None
    t0 = time.monotonic()
    run_jobs(one, jobs, shares, workers, lambda i, job, r: None)
    return {
        "makespan_s": round((time.monotonic() - t0) * scale, 1),
        "admission_wait_sum_s": round(state["wait"], 1),
        "max_running": state["max_running"],
        "max_in_flight": state["max_in_flight"],
        "backfills": budget.backfills,
        "peak_reserved_share": round(budget.peak_reserved / cap, 3),
        "first_starts": starts[:24],
    }


def bounds(jobs: list[dict[str, Any]], workers: int) -> dict[str, float]:
    half = [j["seconds"] for j in jobs if (j["share"] or 0.0) > 0.5]  # never two at once
    return {
        "work_over_workers_s": round(sum(j["seconds"] for j in jobs) / workers, 1),
        "over_half_device_serial_s": round(sum(half), 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--rows", type=Path, default=BENCH / "h200_kernelbench_self_before_weights.json"
    )
    ap.add_argument("--levels", default="1", help="comma-separated: 1,2 replays one batch of both")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--scale", type=float, default=50.0, help="replay this many times faster")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    jobs, cap, calls = load_jobs(args.rows, levels)
    doc: dict[str, Any] = {
        "benchmark": "admission_replay",
        "rows": str(args.rows),
        "levels": levels,
        "workers": args.workers,
        "scale": args.scale,
        "jobs": len(jobs),
        "heavy_jobs": sum(is_heavy(j["share"], args.workers) for j in jobs),
        "measured_hybrid_calls": calls,  # [wall_s, judgements] of each call of the source run
        "bounds": bounds(jobs, args.workers),
        "policies": {},
    }
    for policy in POLICIES:
        runs = [replay(jobs, cap, args.workers, policy, args.scale) for _ in range(args.repeats)]
        doc["policies"][policy] = {**runs[-1], "makespans_s": [r["makespan_s"] for r in runs]}
        print(policy, {k: runs[-1][k] for k in ("makespan_s", "admission_wait_sum_s")})
    text = json.dumps(doc, indent=1) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
