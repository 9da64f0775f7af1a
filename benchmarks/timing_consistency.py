"""Benchmark: are speedups reproducible under load? The calibration of fair timing.

Sections (each resumable row by row in --out; a time-boxed call keeps what it finished):
- `repeat` (at the service's default concurrency; `repeat_w1` at one worker, fewer kernels by
  default): the built-in suite's Triton solutions (real Triton kernels; scripts/export_suite.py writes the same files) at the
  gpu preset, each judged twice with both judgements in flight together; figure: the median
  (and max) over kernels of |log(speedup_1 / speedup_2)|, goal <= 0.03;
- `self` (same two concurrencies): KernelBench references at original sizes judged against
  themselves in hybrid mode (speedup must be 1.0); figures: median (goal within 0.02 of 1.0),
  p05 and p95 (goal inside 0.90..1.10);
- `service`: benchmarks/eval_server.py at today's presets (evals/min of the service against a
  fresh process per request, goal >= 5x), run as a subprocess with the timing guarantee in force.
Top-level fields: concurrency, repeat_median_abs_log_ratio, self_speedup_median/p05/p95 (at the
concurrency), the same under `workers_1`, service_throughput_ratio, rows.

GPU (H200):  python benchmarks/timing_consistency.py --out docs/bench/h200_timing_consistency.json
CPU check:   python benchmarks/timing_consistency.py --quick --out /tmp/tc.json
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
from pathlib import Path
from typing import Any

import bench_common as bc

from tritonforge.config import load_config
from tritonforge.config.eval import EvalSettings
from tritonforge.config.server import ServerConfig
from tritonforge.problems import load_suite
from tritonforge.problems.kernelbench import self_candidate
from tritonforge.types import Problem, Verdict

SECTIONS = ("repeat", "self", "service", "repeat_w1", "self_w1")
GUESS_S = {"repeat": 3.0, "self": 6.0, "service": 200.0}
OVERLAP = 2.5


def jobs_for(section: str, args: argparse.Namespace) -> list[tuple[str, Problem, str]]:
    """(key, problem, source) of a section, in submission order."""
    base, tag = section.removesuffix("_w1"), ("w1" if section.endswith("_w1") else "wc")
    if base == "repeat":
        size = "cpu" if args.device == "cpu" else "gpu"
        problems = [p for p in load_suite("builtin", size=size) if p.solution_src]
        problems = problems[: args.repeat_kernels if tag == "wc" else args.repeat_kernels_w1]
        return [
            (f"repeat:{tag}:{p.id}:{k}", p, p.solution_src or "") for p in problems for k in (1, 2)
        ]
    per_level = -(-(args.self_refs if tag == "wc" else args.self_refs_w1) // 2)  # ceil
    chosen = bc.kernelbench([1, 2], per_level, args.size, every=max(1, 100 // per_level))
    return [(f"self:{tag}:{p.id}", p, self_candidate(p.reference_src)) for p in chosen]


def _figures(rows: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    rep = [r for r in rows if r["key"].startswith(f"repeat:{prefix}:")]
    by: dict[str, list[float]] = {}
    for r in rep:
        if r["status"] == "correct" and r["speedup"]:
            by.setdefault(r["problem"], []).append(r["speedup"])
    logs = [abs(math.log(v[0] / v[1])) for v in by.values() if len(v) >= 2 and v[0] > 0 < v[1]]
    selfs = [
        r["speedup"]
        for r in rows
        if r["key"].startswith(f"self:{prefix}:") and r["status"] == "correct" and r["speedup"]
    ]
    return {
        "repeat_pairs": len(logs),
        "repeat_median_abs_log_ratio": round(statistics.median(logs), 4) if logs else None,
        "repeat_max_abs_log_ratio": round(max(logs), 4) if logs else None,
        "self_n": len(selfs),
        "self_judged": sum(r["key"].startswith(f"self:{prefix}:") for r in rows),
        "self_speedup_median": round(statistics.median(selfs), 4) if selfs else None,
        "self_speedup_p05": bc.percentile(selfs, 0.05, 4),
        "self_speedup_p95": bc.percentile(selfs, 0.95, 4),
    }


def summarize(doc: dict[str, Any]) -> None:
    doc.update(_figures(doc["rows"], "wc"))
    doc["workers_1"] = _figures(doc["rows"], "w1")
    service = doc.get("service") or {}
    doc["service_throughput_ratio"] = service.get("throughput_ratio")


def run_section(
    section: str, args: argparse.Namespace, out: bc.ResultFile, ev: Any, end: float
) -> None:
    done = out.done()
    todo = [j for j in jobs_for(section, args) if j[0] not in done]
    workers = 1 if section.endswith("_w1") else args.concurrency
    mode = "hybrid" if section.startswith("self") else "strict"
    s = load_config(EvalSettings, None, args.set)
    s.device, s.mode = args.device, mode
    s.time_on_cpu = args.device == "cpu"  # the CPU check exercises the timing path (meaningless)

    def evaluate(key: str, problem: Problem, source: str) -> Verdict:
        return ev.evaluate(problem, source, s)

    def on_done(key: str, v: Verdict) -> None:
        out.add(bc.verdict_row(key, v, section=section), summarize)
        print(
            f"{section} {len(out.doc['rows'])} {v.short()} {v.wall_seconds:.1f}s", file=sys.stderr
        )

    bc.judge_all(evaluate, todo, workers, on_done, end)


def run_service(args: argparse.Namespace, out: bc.ResultFile, end: float) -> None:
    if out.doc.get("service") or time.monotonic() > end:
        return
    tmp = Path(tempfile.mkdtemp(prefix="tf-tc-")) / "server.json"
    cpu = args.device == "cpu"
    cmd = [sys.executable, str(Path(__file__).with_name("eval_server.py")), "--device", args.device,
           "--size", "cpu" if cpu else "gpu", "--n", str(8 if cpu else args.service_n),
           "--workers", str(args.concurrency), "--concurrency", "16",
           "--baseline-n", "1" if cpu else "2", "--out", str(tmp)]  # fmt: skip
    try:
        subprocess.run(cmd, timeout=max(30.0, end - time.monotonic() + 60), check=False)
    except subprocess.TimeoutExpired:
        print("service section: time box reached, not recorded", file=sys.stderr)
        return
    if tmp.is_file():
        out.doc["service"] = json.loads(tmp.read_text())
        out.doc["service_session"] = out.session["started"]
        out.save(summarize)


def _pending(sec: str, args: argparse.Namespace, out: bc.ResultFile, done: set[str]) -> bool:
    if sec == "service":
        return not out.doc.get("service")
    return any(j[0] not in done for j in jobs_for(sec, args))


def estimate(args: argparse.Namespace, sections: list[str], out: bc.ResultFile) -> str:
    done, parts, total = out.done(), [], 0.0
    for sec in sections:
        if sec == "service":
            t = 0.0 if out.doc.get("service") else GUESS_S["service"]
        else:
            n = sum(1 for j in jobs_for(sec, args) if j[0] not in done)
            base = sec.removesuffix("_w1")
            walls = [r["wall"] for r in out.rows(f"{base}:")]
            per = bc.median_or(walls, GUESS_S[base])
            t = n * per / (1 if sec.endswith("_w1") else min(args.concurrency, OVERLAP))
        parts.append(f"{sec} ~{t:.0f} s")
        total += t
    return (
        f"expected ~{total:.0f} s ({', '.join(parts)}); new work stops after {args.time_box:.0f} s"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/bench/h200_timing_consistency.json"))
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--size", default="original", help="KernelBench size: original | scaled")
    ap.add_argument("--concurrency", type=int, default=ServerConfig().workers)
    ap.add_argument("--repeat-kernels", type=int, default=20)
    ap.add_argument("--self-refs", type=int, default=50)
    ap.add_argument("--repeat-kernels-w1", type=int, default=10)
    ap.add_argument("--self-refs-w1", type=int, default=20)
    ap.add_argument("--service-n", type=int, default=24)
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--time-box", type=float, default=510.0, help="start nothing after (s)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    bc.add_retry_arg(ap)
    ap.add_argument("--quick", action="store_true", help="CPU check: few, small, no service")
    args = ap.parse_args()
    if args.quick:
        args.device, args.size, args.concurrency = "cpu", "scaled", 2
        args.repeat_kernels, args.self_refs, args.self_refs_w1 = 2, 2, 1
        args.repeat_kernels_w1 = 2
        args.sections = args.sections.replace("service", "").replace(",,", ",")
    sections = [x for x in args.sections.split(",") if x]
    header = {"benchmark": "timing_consistency", "device": args.device,
              "concurrency": args.concurrency,
              "timing_clock": load_config(EvalSettings, None, args.set).timing_clock}  # fmt: skip
    out = bc.ResultFile(args.out, header, bc.retry_statuses(args))
    print(estimate(args, sections, out), file=sys.stderr, flush=True)
    from tritonforge.evaluation.judge.evaluator import Evaluator

    device = "cuda:0" if args.device == "cuda" else "cpu"
    out.doc["environment"] = bc.environment(device)
    end = time.monotonic() + args.time_box
    done = out.done()
    for group in (("repeat", "self"), ("service",), ("repeat_w1", "self_w1")):
        todo = [sec for sec in group if sec in sections and _pending(sec, args, out, done)]
        if not todo or time.monotonic() > end:
            continue
        if todo == ["service"]:
            run_service(args, out, end)
            continue
        with Evaluator(EvalSettings(device=args.device)) as ev:  # one judge per concurrency
            for sec in todo:
                run_section(sec, args, out, ev, end)
    if not out.session["rows"] and not out.doc.get("service_session"):
        out.drop_session()  # nothing to do: this call does not count
    out.save(summarize)
    keys = ("concurrency", "repeat_median_abs_log_ratio", "self_speedup_median",
            "self_speedup_p05", "self_speedup_p95", "workers_1", "service_throughput_ratio")  # fmt: skip
    print(json.dumps({k: out.doc.get(k) for k in keys}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
