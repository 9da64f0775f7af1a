"""Benchmark: the evaluation server against the original one-process-per-request design.

Judges one batch of built-in candidates (solutions plus broken variants, every source unique so
the verdict cache never answers) two ways, in one run:
- server: `tritonforge serve-eval` as a subprocess, requests sent at --concurrency through
  EvalClient; latency = send to answer, throughput = candidates / wall time of the batch (the
  server's start-up and one warm-up request are reported separately, not counted);
- baseline: a fresh `python -m tritonforge eval-kernel REF CAND --json` per candidate, one after
  another (the original design: a new Python, torch import and CUDA init per request, requests
  serialised); latency = one process's wall time. `--baseline-n K` measures only the first K
  candidates and extrapolates the throughput (stated in the output).
Prints one JSON object and writes it to --out. Device-agnostic: `--device cpu --size cpu` (Triton
interpreter) or `--device cuda --size gpu` (H200).

    python benchmarks/eval_server.py --device cpu --size cpu --out bench_cpu.json
    python benchmarks/eval_server.py --device cuda --size gpu --workers 8 --concurrency 32 --out bench_h200.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import child_env, start_service, stop_service  # noqa: E402

from tritonforge.evaluation.service.client import EvalClient  # noqa: E402
from tritonforge.problems import load_suite  # noqa: E402
from tritonforge.types import Problem  # noqa: E402

BROKEN = ("syntax", "import", "missing", "wrong")


def broken_variant(kind: str, src: str) -> str:
    if kind == "syntax":
        return src + "\ndef broken(:\n    pass\n"
    if kind == "import":
        return "import tritonforge_no_such_module\n" + src
    if kind == "missing":
        return src.replace("class ModelNew", "class ModelOld")
    # wrong: a subclass doubling the output (a torch op in forward: strict mode flags it)
    return (
        src
        + "\n\nclass _Doubled(ModelNew):\n    def forward(self, *args):\n        return super().forward(*args) * 2\n\n\nModelNew = _Doubled\n"
    )


def candidates(size: str, n: int, broken_every: int) -> list[tuple[Problem, str, str]]:
    """n (problem, source, label) items; every `broken_every`-th is a broken variant."""
    problems = [p for p in load_suite("builtin", size=size) if p.solution_src]
    out = []
    for i in range(n):
        p = problems[i % len(problems)]
        src, label = p.solution_src or "", "solution"
        if broken_every and i % broken_every == broken_every - 1:
            label = BROKEN[(i // broken_every) % len(BROKEN)]
            src = broken_variant(label, src)
        out.append((p, src + f"\n# benchmark candidate {i}\n", label))
    return out


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def _summary(latencies: list[float], total: float, statuses: list[str]) -> dict[str, Any]:
    return {
        "n": len(latencies),
        "total_s": round(total, 2),
        "evals_per_min": round(60 * len(latencies) / total, 2) if total > 0 else None,
        "p50_s": round(_pct(latencies, 0.5), 3),
        "p95_s": round(_pct(latencies, 0.95), 3),
        "mean_s": round(statistics.fmean(latencies), 3),
        "statuses": dict(Counter(statuses)),
    }


def start_server(args: argparse.Namespace, log_path: Path) -> tuple[subprocess.Popen, str, float]:
    return start_service(args.device, args.workers, log_path, [f"queue_size={max(256, args.n)}"])


async def run_server(url: str, items: list[tuple[Problem, str, str]], concurrency: int):
    sem = asyncio.Semaphore(concurrency)
    async with EvalClient(url, timeout_s=3600, max_attempts=3) as client:
        warm_problem = items[0][0]
        t0 = time.monotonic()
        await client.evaluate(warm_problem, (warm_problem.solution_src or "") + "\n# warm-up\n")
        warm_s = time.monotonic() - t0

        async def one(p: Problem, src: str) -> tuple[float, str]:
            async with sem:
                t = time.monotonic()
                v = await client.evaluate(p, src)
                return time.monotonic() - t, v.status.value

        t0 = time.monotonic()
        results = await asyncio.gather(*(one(p, s) for p, s, _ in items))
        total = time.monotonic() - t0
    return results, total, warm_s


# -- baseline -------------------------------------------------------------------------------------


def run_baseline(args: argparse.Namespace, items: list[tuple[Problem, str, str]], tmp: Path):
    results = []
    t0 = time.monotonic()
    for i, (p, src, _) in enumerate(items):
        ref, cand = tmp / f"ref_{i}.py", tmp / f"cand_{i}.py"
        ref.write_text(p.reference_src)
        cand.write_text(src)
        cmd = [sys.executable, "-m", "tritonforge", "--log-level", "error", "eval-kernel",
               str(ref), str(cand), "--json", "--device", args.device]  # fmt: skip
        t = time.monotonic()
        out = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=3600)
        dt = time.monotonic() - t
        try:
            status = json.loads(out.stdout.strip().splitlines()[-1])["status"]
        except (IndexError, ValueError, KeyError):
            status = f"no_verdict(rc={out.returncode})"
        results.append((dt, status))
        print(f"baseline {i + 1}/{len(items)} {dt:.1f}s {status}", file=sys.stderr)
    return results, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--size", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--n", type=int, default=64, help="candidates in the batch")
    ap.add_argument("--broken-every", type=int, default=4, help="every k-th candidate is broken")
    ap.add_argument("--concurrency", type=int, default=16, help="requests in flight (server)")
    ap.add_argument("--workers", type=int, default=4, help="server evaluations per device")
    ap.add_argument("--baseline-n", type=int, default=None, help="baseline sample (default n)")
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    items = candidates(args.size, args.n, args.broken_every)
    tmp = Path(tempfile.mkdtemp(prefix="tf-bench-"))
    proc, url, startup_s = start_server(args, tmp / "server.log")
    try:
        srv, srv_total, warm_s = asyncio.run(run_server(url, items, args.concurrency))
    finally:
        stop_service(proc)  # the server we started, by PID
    result: dict[str, Any] = {
        "benchmark": "eval_server",
        "device": args.device,
        "size": args.size,
        "n": args.n,
        "broken": sum(label != "solution" for *_, label in items),
        "concurrency": args.concurrency,
        "workers_per_device": args.workers,
        "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "server": {
            **_summary([d for d, _ in srv], srv_total, [s for _, s in srv]),
            "startup_s": round(startup_s, 2),
            "warmup_request_s": round(warm_s, 2),
        },
        "latency_definition": "server: send->answer under concurrency; baseline: one process",
    }
    if not args.skip_baseline:
        k = min(args.n, args.baseline_n or args.n)
        base, base_total = run_baseline(args, items[:k], tmp)
        b = _summary([d for d, _ in base], base_total, [s for _, s in base])
        b["extrapolated_total_s"] = round(base_total * args.n / k, 2)
        b["extrapolated"] = k < args.n
        result["baseline"] = b
        agree = sum(s == bs for (_, s), (_, bs) in zip(srv[:k], base))
        result["status_agreement"] = f"{agree}/{k}"
        if b["evals_per_min"]:
            result["throughput_ratio"] = round(
                result["server"]["evals_per_min"] / b["evals_per_min"], 2
            )
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
