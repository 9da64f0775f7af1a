"""Benchmark: evaluation throughput on a mix of public LLM-written kernels, grouped as in GRPO.

Starts `tritonforge serve-eval --device D --workers W` and judges a mix built from the honest
field corpus (tests/eval/corpus/field_honest: LLM-written Triton solutions of KernelBench level 1
and 2 problems from a public repository, recorded correct by their source) under one preset: per
problem a *group* of the source's kernel and wrong variants of it made by the repair-data
mutations (jobs/repair_data.py MUTATIONS: an off-by-one mask, a missing store, a swapped op,
another problem's kernel, ...), as a GRPO step's samples would be. Three passes:

1. **mix**: every group as one `/v1/eval/batch` (the service times a group's correct members in
   one round-robin: judge/group_timing.py), `--in-flight` groups at once; wall time of the pass,
   per-verdict wall (request sent to its answer), and each verdict's phases;
2. **serial**: the same cases one at a time through `/v1/eval` on a `--workers 1` service: the
   statuses to agree with, and the solo speedups;
3. the comparison: `status_agreement_with_serial` (fraction of cases with the same status) and
   `group_vs_solo_speedup_median_abs_log_ratio` (median |log(group speedup / solo speedup)| over
   cases timed both ways).

Writes JSON with `verdicts_per_min`, `p95_wall_s`, `status_agreement_with_serial`,
`group_vs_solo_speedup_median_abs_log_ratio`, `phases` (per phase: count, median and p95
seconds, total share of the verdicts' summed phase time), the case list with its sources, and
the environment.

    python benchmarks/eval_mix.py --device cuda --workers 4 --preset kernelbench    # H200
    python benchmarks/eval_mix.py --device cpu --groups 2 --out runs/bench/cpu_eval_mix.json

On the CPU (small mode) the cases run at CPU sizes on the Triton interpreter and nothing is
timed: a check that the script and the service's group path work, not a figure. Its default
output is under runs/, and docs/bench is refused for a CPU run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import httpx  # noqa: E402
from bench_common import environment, percentile, serve_eval  # noqa: E402

import helpers.field_honest as fh  # noqa: E402
from tritonforge.jobs.repair_data import MUTATIONS  # noqa: E402
from tritonforge.types import Problem, Verdict  # noqa: E402

DEFAULT_OUT = {"cuda": "docs/bench/h200_eval_mix.json", "cpu": "runs/bench/cpu_eval_mix.json"}
VARIANTS = ("mask_off_by_one", "missing_store", "wrong_op", "other_kernel", "grid_floor")


def groups(args: argparse.Namespace) -> list[tuple[Problem, list[tuple[str, str]]]]:
    """Per problem: (problem, [(case name, source)]): the honest kernel first, then up to
    `--per-group` - 1 of its mutations that apply."""
    honest = [c for c in fh.cases() if c.get("honest", True)]
    if args.device == "cpu":
        honest = [c for c in honest if c.get("cpu") == "same" or c.get("cpu_tier") == "default"]
    honest = honest[: args.groups] if args.groups else honest
    size = "cpu" if args.device == "cpu" else "original"
    problems = fh.problems(honest, size)
    solutions = [c["source"] for c in honest]
    out = []
    for c in honest:
        members = [(c["file"], c["source"])]
        for name in VARIANTS:
            if len(members) >= args.per_group:
                break
            broken = MUTATIONS.lookup(name)(c["source"], solutions)
            if broken is not None and broken != c["source"]:
                members.append((f"{c['file']}~{name}", broken))
        if c["file"] in problems:  # (a problem that cannot be scaled down is left out on a CPU)
            out.append((problems[c["file"]], members))
    return out


def _payload(problem: Problem, source: str, preset: str) -> dict[str, Any]:
    return {"problem": problem.model_dump(mode="json"), "source": source, "preset": preset}


async def _mix(url: str, work: list, preset: str, in_flight: int) -> dict[str, Any]:
    """Every group as one batch, `in_flight` batches at once."""
    sem = asyncio.Semaphore(in_flight)
    rows: dict[str, dict[str, Any]] = {}

    async def one(client: httpx.AsyncClient, problem: Problem, members: list) -> None:
        async with sem:
            t = time.monotonic()
            body = [_payload(problem, src, preset) for _, src in members]
            r = await client.post(f"{url}/v1/eval/batch", json=body, timeout=None)
            wall = time.monotonic() - t
            for (name, _), item in zip(members, r.json()):
                rows[name] = {**_row(Verdict.model_validate(item)), "request_wall_s": wall}

    t0 = time.monotonic()
    async with httpx.AsyncClient() as client:
        await asyncio.gather(*(one(client, p, m) for p, m in work))
    return {"wall_s": time.monotonic() - t0, "rows": rows}


async def _serial(url: str, work: list, preset: str) -> dict[str, dict[str, Any]]:
    rows = {}
    async with httpx.AsyncClient() as client:
        for problem, members in work:
            for name, src in members:
                r = await client.post(f"{url}/v1/eval", json=_payload(problem, src, preset),
                                      timeout=None)  # fmt: skip
                rows[name] = _row(Verdict.model_validate(r.json()))
    return rows


def _row(v: Verdict) -> dict[str, Any]:
    return {
        "status": v.status.value,
        "rule": v.rule,
        "speedup": v.speedup,
        "wall_s": v.wall_seconds,
        "phases": v.phase_seconds,
    }


def phase_table(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per phase: how many verdicts had it, its median and p95 seconds, and its share of the
    verdicts' summed phase time (timed-round diagnostics `round_*` left out: not phases)."""
    per: dict[str, list[float]] = {}
    for r in rows:
        for k, x in (r.get("phases") or {}).items():
            if not k.startswith("round_"):
                per.setdefault(k, []).append(float(x))
    total = sum(sum(v) for v in per.values()) or 1.0
    return {
        k: {"count": len(v), "median_s": round(statistics.median(v), 4),
            "p95_s": percentile(v, 95, 4), "share": round(sum(v) / total, 4)}
        for k, v in sorted(per.items(), key=lambda kv: -sum(kv[1]))
    }  # fmt: skip


def compare(mix: dict[str, dict], serial: dict[str, dict]) -> dict[str, Any]:
    names = sorted(set(mix) & set(serial))
    same = sum(mix[n]["status"] == serial[n]["status"] for n in names)
    ratios = [
        abs(math.log(mix[n]["speedup"] / serial[n]["speedup"]))
        for n in names
        if mix[n].get("speedup") and serial[n].get("speedup")
    ]
    return {
        "status_agreement_with_serial": round(same / len(names), 4) if names else None,
        "group_vs_solo_speedup_median_abs_log_ratio": (
            round(statistics.median(ratios), 4) if ratios else None
        ),
        "disagreements": [
            {"case": n, "mix": mix[n]["status"], "serial": serial[n]["status"]}
            for n in names
            if mix[n]["status"] != serial[n]["status"]
        ],
        "timed_both": len(ratios),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--preset", default="kernelbench")
    ap.add_argument("--groups", type=int, default=0, help="problems (0: all)")
    ap.add_argument("--per-group", type=int, default=4, help="samples per group")
    ap.add_argument("--in-flight", type=int, default=4, help="groups in flight")
    ap.add_argument("--no-serial", action="store_true", help="skip the serial pass")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out = Path(args.out or DEFAULT_OUT[args.device])
    if args.device == "cpu" and "docs/bench" in str(out):
        sys.exit("a CPU run is a check of the script, not a figure: write it under runs/")
    if not fh.data_available():
        sys.exit(
            "KernelBench data not found (../shared/data/kernelbench or TRITONFORGE_KERNELBENCH)"
        )
    work = groups(args)
    logs = Path(tempfile.mkdtemp(prefix="tf-eval-mix-"))
    with serve_eval(args.device, args.workers, logs / "mix.log", ["cache_entries=0"]) as (
        url,
        startup,
    ):
        mix = asyncio.run(_mix(url, work, args.preset, args.in_flight))
    serial: dict[str, dict] = {}
    if not args.no_serial:
        with serve_eval(args.device, 1, logs / "serial.log", ["cache_entries=0"]) as (url, _):
            serial = asyncio.run(_serial(url, work, args.preset))
    rows = list(mix["rows"].values())
    walls = [r["request_wall_s"] for r in rows]
    result = {
        "device": args.device,
        "preset": args.preset,
        "workers": args.workers,
        "in_flight_groups": args.in_flight,
        "groups": len(work),
        "verdicts": len(rows),
        "mix_wall_s": round(mix["wall_s"], 2),
        "verdicts_per_min": round(60.0 * len(rows) / mix["wall_s"], 2) if mix["wall_s"] else None,
        "p95_wall_s": percentile(walls, 95, 2),
        **compare(mix["rows"], serial),
        "phases": phase_table(rows),
        "cases": {n: {**r, "phases": None} for n, r in mix["rows"].items()},
        "serial": {n: {k: r[k] for k in ("status", "rule", "speedup")} for n, r in serial.items()},
        "sources": "tests/eval/corpus/field_honest (Distant22/KernelBench f6b8359, MIT) and "
        "repair-data mutations of each",
        "service_startup_s": round(startup, 2),
        "environment": environment(args.device),
        "date": time.strftime("%Y-%m-%d"),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    keys = ("verdicts", "verdicts_per_min", "p95_wall_s", "status_agreement_with_serial",
            "group_vs_solo_speedup_median_abs_log_ratio")  # fmt: skip
    print(json.dumps({k: result[k] for k in keys}))


if __name__ == "__main__":
    main()
