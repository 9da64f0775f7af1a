"""Benchmark: N concurrent `tritonforge eval-kernel` processes on one device against the service.

What a user's script does (`xargs -P 8 tritonforge eval-kernel ...`): the cases of
tests/eval/corpus/field_honest under one preset (default kernelbench), first judged by one
`serve-eval --workers W` (or read from an earlier field_honest.py result, `--service-from`), then
by `--procs` concurrent `eval-kernel REF CAND --json` processes, each its own judge with its own
fork server and timing process on the same device: their gate (exclusive timing) and memory
ledger are shared only through the runtime directory (host_gate.py, host_ledger.py). Per case:
both statuses and speedups. Top level: `status_agreement` (fraction of cases where the two agree;
goal 1.0), `speedup_median_abs_log_ratio` (median over cases timed by both of |ln(cli / service)|;
goal <= 0.05, the repeatability of fair timing), the CLI's `out_of_resources`/`resource_limit`
count. Resumable rows (bench_common ResultFile); with --budget-s no judgement starts after that
many seconds (half of it for the service's run).

    python benchmarks/parallel_cli.py --device cuda --procs 8        # docs/bench/h200_parallel_cli.json
    python benchmarks/parallel_cli.py --device cpu --cases 2 --procs 2 --out runs/bench/cpu_parallel_cli.json

On the CPU (small mode) nothing is timed, so the ratio is null: a check that the script works.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import field_honest as fhb  # noqa: E402
from bench_common import ResultFile, child_env, environment  # noqa: E402

import helpers.field_honest as fh  # noqa: E402

DEFAULT_OUT = {
    "cuda": "docs/bench/h200_parallel_cli.json",
    "cpu": "runs/bench/cpu_parallel_cli.json",
}


def service_verdicts(args: argparse.Namespace, cases: list[dict], tmp: Path) -> dict[str, dict]:
    """case file -> the service's verdict fields (status, rule, speedup) under args.preset."""
    if args.service_from:
        rows = json.loads(Path(args.service_from).read_text())["rows"]
        return {r["case"]: r for r in rows if r["preset"] == args.preset}
    out = tmp / "service.json"
    cmd = [sys.executable, str(HERE / "field_honest.py"), "--device", args.device,
           "--workers", str(args.workers), "--presets", args.preset, "--out", str(out),
           "--only", ",".join(c["file"] for c in cases)]  # fmt: skip
    if args.trials:
        cmd += ["--trials", str(args.trials)]
    if args.budget_s:
        cmd += ["--budget-s", str(args.budget_s / 2)]  # half for the service, half for the CLI
    subprocess.run(cmd, check=True, env=child_env(), timeout=args.timeout_s)
    return {r["case"]: r for r in json.loads(out.read_text())["rows"]}


def eval_kernel(args: argparse.Namespace, ref: Path, cand: Path) -> tuple[dict[str, Any], float]:
    """One `tritonforge eval-kernel --json` process: (its verdict, wall seconds)."""
    cmd = [sys.executable, "-m", "tritonforge", "--log-level", "error", "eval-kernel", str(ref),
           str(cand), "--json", "--quiet", "--device", args.device, "--preset", args.preset]  # fmt: skip
    if args.trials:
        cmd += ["--trials", str(args.trials)]
    t0 = time.monotonic()
    run = subprocess.run(
        cmd, capture_output=True, text=True, env=child_env(), timeout=args.timeout_s
    )
    try:
        verdict = fhb.strict_json(run.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        verdict = {"status": f"no_verdict(rc={run.returncode})", "message": run.stderr[-600:]}
    return verdict, time.monotonic() - t0


def summarise(doc: dict[str, Any]) -> None:
    rows = doc["rows"]
    doc["cases"] = len(rows)
    doc["status_agreement"] = (
        round(sum(r["cli_status"] == r["service_status"] for r in rows) / len(rows), 4)
        if rows
        else None
    )
    logs = [
        abs(math.log(r["cli_speedup"] / r["service_speedup"]))
        for r in rows
        if r["cli_speedup"] and r["service_speedup"]
    ]
    doc["timed_pairs"] = len(logs)
    doc["speedup_median_abs_log_ratio"] = round(statistics.median(logs), 4) if logs else None
    doc["cli_memory_verdicts"] = sum(
        r["cli_status"] in ("out_of_resources", "resource_limit") for r in rows
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    ap.add_argument("--procs", type=int, default=8, help="concurrent eval-kernel processes")
    ap.add_argument("--workers", type=int, default=4, help="serve-eval --workers (service run)")
    ap.add_argument("--preset", default="kernelbench", choices=fh.PRESETS)
    ap.add_argument("--cases", type=int, default=None)
    ap.add_argument("--only", default="", help="comma-separated substrings of case files")
    ap.add_argument("--trials", type=int, default=None, help="correctness trials (preset's)")
    ap.add_argument("--service-from", default="", help="field_honest.py JSON to compare with")
    ap.add_argument("--timeout-s", type=float, default=7200.0, help="one process's limit")
    ap.add_argument("--budget-s", type=float, default=None, help="start no judgement after this")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or Path(DEFAULT_OUT[args.device])
    cases = fhb.choose(args)
    size = "original" if args.device == "cuda" else "cpu"
    problems = fh.problems(cases, size)
    cases = [c for c in cases if c["file"] in problems]
    header = {"benchmark": "parallel_cli", "device": args.device, "size": size,
              "preset": args.preset, "procs": args.procs, "command": " ".join(sys.argv),
              "environment": environment(args.device)}  # fmt: skip
    result = ResultFile(out, header)
    todo = [c for c in cases if c["file"] not in result.done()]
    with tempfile.TemporaryDirectory(prefix="tf-parallel-") as tmp_name:
        tmp = Path(tmp_name)
        service = service_verdicts(args, todo, tmp) if todo else {}

        deadline = time.monotonic() + (args.budget_s or float("inf"))

        def one(case: dict[str, Any]) -> None:
            if time.monotonic() > deadline or case["file"] not in service:
                return  # left for the next call (rows are kept)
            ref, cand = tmp / f"ref_{case['file']}", tmp / case["file"]
            ref.write_text(problems[case["file"]].reference_src)
            cand.write_text(case["source"])
            v, wall = eval_kernel(args, ref, cand)
            s = service.get(case["file"], {})
            row = {"key": case["file"], "problem": case["problem"],
                   "service_status": s.get("status"), "service_rule": s.get("rule"),
                   "service_speedup": s.get("speedup"), "cli_status": v.get("status"),
                   "cli_rule": v.get("rule"), "cli_speedup": v.get("speedup"),
                   "cli_wall_s": round(wall, 1), "cli_message": (v.get("message") or "")[:300]}  # fmt: skip
            result.add(row, summarise)
            print(f"{case['file']}: cli {row['cli_status']} / service {row['service_status']}",
                  file=sys.stderr)  # fmt: skip

        with ThreadPoolExecutor(args.procs) as pool:
            list(pool.map(one, todo))
    result.save(summarise)
    keys = ("cases", "status_agreement", "speedup_median_abs_log_ratio", "cli_memory_verdicts")
    print(json.dumps({**{k: result.doc.get(k) for k in keys}, "out": str(out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
