"""Benchmark: every KernelBench L1+L2 reference judged against itself, at its original sizes.

Per problem, two judgements (interleaved, so a time-boxed call makes progress on both):
- `hybrid`: the reference with `class Model` renamed `ModelNew`, hybrid mode, timed: must be
  accepted, with a speedup near 1.0;
- `strict_decoy`: the same with an unused @triton.jit kernel added, strict mode: must be rejected.
Rows are written to --out after every judgement; a later call skips rows already there (resume),
and session walls add up. Summary fields: accepted, total, strict_decoy_rejected,
strict_decoy_total, wall_s, candidates_per_min, peak_device_gib (device-wide, every process),
spawn_warm_s (fork + CUDA init of a worker; the fork server is started before the clock and
its start recorded apart), by_variant (wall, judgements and judgements/min of the calls that ran
one variant alone, e.g. `--variants hybrid`: the 200 self-judgements' own throughput),
self_speedup median and
percentiles, exceptions (every problem not accepted / decoy not rejected, with its reason),
device_stats (memory budget and timing counters of the judge, backfills included), one row per
judgement, in problem order. Judgements start in the order of evaluation/batch_order.py
(memory-heavy problems kept apart, light ones beside them); each session records `heavy_jobs`.

GPU (H200):  python benchmarks/kernelbench_self.py --out docs/bench/h200_kernelbench_self.json
CPU check:   python benchmarks/kernelbench_self.py --quick --out /tmp/kb_self.json
Concurrency defaults to the evaluation service's (`ServerConfig().workers`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import bench_common as bc

from tritonforge.config import load_config
from tritonforge.config.eval import EvalSettings
from tritonforge.config.server import ServerConfig
from tritonforge.problems.kernelbench import self_candidate
from tritonforge.types import Verdict

VARIANTS = ("hybrid", "strict_decoy")
GUESS_S = {
    "cuda": {"hybrid": 6.0, "strict_decoy": 2.0},
    "cpu": {"hybrid": 8.0, "strict_decoy": 4.0},
}
OVERLAP = 2.5  # assumed effective parallelism of W evaluations (timing is exclusive)


def settings(args: argparse.Namespace, variant: str) -> EvalSettings:
    s = load_config(EvalSettings, None, args.set)
    s.device = args.device
    for name in ("import_s", "compile_s", "correctness_s", "timing_s"):
        setattr(s.budgets, name, args.timeout)
    if variant == "hybrid":
        s.mode = "hybrid"
        s.measure_performance = not args.quick
    else:  # rejected at its first trial: fewer trials, never timed
        s.mode, s.correctness_trials, s.measure_performance = "strict", 2, False
    return s


def summarize(doc: dict[str, Any]) -> None:
    rows = doc["rows"]
    hyb = [r for r in rows if r["variant"] == "hybrid"]
    dec = [r for r in rows if r["variant"] == "strict_decoy"]
    doc["total"], doc["accepted"] = len(hyb), sum(r["status"] == "correct" for r in hyb)
    doc["strict_decoy_total"] = len(dec)
    doc["strict_decoy_rejected"] = sum(r["status"] == "reward_hack" for r in dec)
    doc["judgements"] = len(rows)
    # throughput of one variant alone, from the calls that ran only it (`--variants hybrid`)
    doc["by_variant"] = {}
    for variant in VARIANTS:
        alone = [x for x in doc["sessions"] if x.get("variants") == [variant]]
        wall, n = sum(x["wall_s"] for x in alone), sum(x["rows"] for x in alone)
        doc["by_variant"][variant] = {
            "wall_s": round(wall, 2),
            "judgements": n,
            "per_min": round(60 * n / wall, 2) if wall else None,
        }
    wall = doc.get("wall_s") or 0.0
    doc["candidates_per_min"] = round(60 * len(rows) / wall, 2) if wall else None
    speedups = [r["speedup"] for r in hyb if r["speedup"] is not None]
    doc["self_speedup_median"] = round(statistics.median(speedups), 4) if speedups else None
    doc["self_speedup_p05"] = bc.percentile(speedups, 0.05, 4)
    doc["self_speedup_p95"] = bc.percentile(speedups, 0.95, 4)
    spawns = [r["spawn_s"] for r in rows if r.get("spawn_s") is not None]
    doc["spawn_warm_s"] = {
        "median": round(statistics.median(spawns), 3) if spawns else None,
        "p95": bc.percentile(spawns, 0.95, 3),
        "n": len(spawns),
    }
    expected = {"hybrid": "correct", "strict_decoy": "reward_hack"}
    doc["exceptions"] = [
        {k: r[k] for k in ("variant", "problem", "status", "rule", "message")}
        for r in rows
        if r["status"] != expected[r["variant"]]
    ]


def estimate(
    todo: list[tuple[str, Any, str]], doc: dict[str, Any], args: argparse.Namespace
) -> str:
    guess = GUESS_S["cpu" if args.device == "cpu" else "cuda"]
    per = {}
    for variant in VARIANTS:
        walls = [r["wall"] for r in doc["rows"] if r["variant"] == variant]
        per[variant] = bc.median_or(walls, guess[variant])
    total = sum(per[key.split(":")[0]] for key, _, _ in todo)
    eta = total / min(args.workers, OVERLAP)
    src = "measured medians" if doc["rows"] else "guesses"
    return (
        f"{len(todo)} judgements to do ({len(doc['rows'])} already in {args.out}); "
        f"expected ~{eta:.0f} s at {args.workers} in flight "
        f"({', '.join(f'{k} {v:.1f} s' for k, v in per.items())} each, {src}); "
        f"this call stops starting new ones after {args.time_box:.0f} s"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="1,2")
    ap.add_argument("--limit", type=int, default=None, help="first N problems of each level")
    ap.add_argument(
        "--only", default="", help="comma-separated substrings: only problems whose id has one"
    )
    ap.add_argument("--out", type=Path, default=Path("docs/bench/h200_kernelbench_self.json"))
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--size", default="original", help="original | scaled")
    ap.add_argument("--workers", type=int, default=ServerConfig().workers)
    ap.add_argument("--timeout", type=float, default=120.0, help="budget of each phase (s)")
    ap.add_argument("--time-box", type=float, default=510.0, help="start nothing after (s)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    bc.add_retry_arg(ap)
    ap.add_argument("--quick", action="store_true", help="CPU check: scaled, 2 per level, untimed")
    args = ap.parse_args()
    if args.quick:
        args.device, args.size, args.workers = "cpu", "scaled", 2
        args.limit = args.limit or 2
    levels = [int(x) for x in args.levels.split(",")]
    variants = bc.known_names(ap, "--variants", args.variants, VARIANTS)
    problems = bc.kernelbench(levels, args.limit, args.size)
    only = [x for x in args.only.split(",") if x]
    if only:
        problems = [p for p in problems if any(x in p.id for x in only)]
        if not problems:
            ap.error(f"--only {args.only!r} matches no problem of levels {args.levels}")
    header = {"benchmark": "kernelbench_self", "device": args.device, "size": args.size,
              "workers": args.workers, "levels": levels}  # fmt: skip
    out = bc.ResultFile(args.out, header, bc.retry_statuses(args))
    out.session["variants"] = variants
    done = out.done()
    todo = [
        (f"{variant}:{p.id}", p, self_candidate(p.reference_src, decoy=variant != "hybrid"))
        for p in problems
        for variant in variants
        if f"{variant}:{p.id}" not in done
    ]
    print(estimate(todo, out.doc, args), file=sys.stderr, flush=True)
    if not todo:
        out.drop_session()
        return 0
    from tritonforge.evaluation import batch_order
    from tritonforge.evaluation.judge.evaluator import Evaluator

    device = "cuda:0" if args.device == "cuda" else "cpu"
    out.doc["environment"] = bc.environment(device)
    per_variant = {v: settings(args, v) for v in VARIANTS}

    def evaluate(key: str, problem, source: str) -> Verdict:
        return ev.evaluate(problem, source, per_variant[key.split(":")[0]])

    def on_done(key: str, v: Verdict) -> None:
        ph = v.phase_seconds
        spawn = ph.get("spawn", 0.0) + ph.get("cuda_init", 0.0) if "spawn" in ph else None
        end = round(time.monotonic() - t0, 2)  # (start: end - wall) for the session's timeline
        row = bc.verdict_row(key, v, variant=key.split(":")[0], spawn_s=spawn, end_s=end)
        out.add(row, summarize)
        print(f"{len(out.doc['rows'])} {v.short()} {v.wall_seconds:.1f}s", file=sys.stderr)

    t0 = time.monotonic()
    with Evaluator(per_variant["hybrid"]) as ev, bc.DevicePeak(device) as peak:
        ev.server(device)  # the fork server's start is not a worker spawn
        out.session["fork_server_start_s"] = round(time.monotonic() - t0, 2)
        # memory-heavy problems kept apart (evaluation/batch_order.py); shares are estimated
        # on the meta device before the clock of the first judgement
        shares = batch_order.shares_for([p.reference_src for _, p, _ in todo], ev.settings, device)
        out.session["heavy_jobs"] = sum(batch_order.is_heavy(x, args.workers) for x in shares)
        bc.judge_all(evaluate, todo, args.workers, on_done, t0 + args.time_box, shares)
        out.doc["device_stats"] = ev.device_stats()
    rank = {p.id: i for i, p in enumerate(problems)}  # rows in problem order, not finish order
    out.doc["rows"].sort(key=lambda r: (rank.get(r["problem"], len(rank)), r["variant"]))
    seen = [x for x in (peak.gib(), out.doc.get("peak_device_gib")) if x is not None]
    out.doc["peak_device_gib"] = max(seen) if seen else None  # None: no GPU (CPU check)
    out.save(summarize)
    keys = ("accepted", "total", "strict_decoy_rejected", "strict_decoy_total", "wall_s",
            "candidates_per_min", "peak_device_gib", "self_speedup_median", "spawn_warm_s")  # fmt: skip
    print({k: out.doc.get(k) for k in keys})
    return 0


if __name__ == "__main__":
    sys.exit(main())
