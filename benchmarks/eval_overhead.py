"""Engine overhead per candidate: Evaluator.evaluate wall time minus the candidate's own work.

For a sample of built-in problems (their reference Triton solutions as candidates) this measures

- `wall`: time of `Evaluator.evaluate` with a warm fork server, both the first evaluation of a
  problem (reference built and its outputs computed: cache miss) and the median of repeats
  (reference outputs cached, as when many samples of one problem are judged);
- `own`: the candidate's own compile and run, measured in a fresh subprocess with the same
  environment as a worker (TRITON_INTERPRET=1 on CPU, one thread, private Triton cache), torch
  and triton imported (and CUDA initialised) before the clock starts: the first forward call
  (compile + launch) plus one median forward for every further call the engine makes;
- `overhead = wall - own` per problem and the median over problems, against the target
  (1.5 s on CPU, 1.0 s on a GPU); the cold start (fork server start + first verdict) separately.

Usage: python benchmarks/eval_overhead.py [--device cpu|cuda] [--size cpu|gpu] [--sample N]
       [--problems a,b] [--repeats R] [--transport auto|memfd] [--out results.json]
Prints one JSON document on stdout (and writes it to --out, after every problem, with
`finished` false until the last). Device-agnostic: on a GPU run
`--device cuda --size gpu`; the engine's GPU timing calls are counted as candidate runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_S = {"cpu": 1.5, "cuda": 1.0}
_OWN_SCRIPT = r"""
import json, os, sys, time, importlib.util, statistics
import torch, triton  # imported before the clock, as in the preloaded fork server
spec = json.loads(sys.stdin.read())
dev = spec["device"]
if dev != "cpu":
    torch.zeros(1, device=dev); torch.cuda.synchronize()  # context init is the engine's cost
sync = (lambda: torch.cuda.synchronize()) if dev != "cpu" else (lambda: None)
ref = {}
exec(compile(spec["reference"], "<reference>", "exec"), ref)
path = os.path.join(spec["tmp"], "candidate.py")
with open(path, "w") as f:
    f.write(spec["solution"])
mod_spec = importlib.util.spec_from_file_location("candidate", path)
cand = importlib.util.module_from_spec(mod_spec)
t_import = time.perf_counter()
mod_spec.loader.exec_module(cand)
t_import = time.perf_counter() - t_import
torch.manual_seed(42)
init = list(ref["get_init_inputs"]())
torch.manual_seed(42)
model = cand.ModelNew(*init)
if isinstance(model, torch.nn.Module):
    model = model.to(dev)
torch.manual_seed(0)
inputs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in ref["get_inputs"]()]
with torch.no_grad():
    t0 = time.perf_counter(); model(*inputs); sync(); first = time.perf_counter() - t0
    runs = []
    for _ in range(spec["runs"]):
        t0 = time.perf_counter(); model(*inputs); sync(); runs.append(time.perf_counter() - t0)
print(json.dumps({"import_s": t_import, "first_s": first, "run_s": statistics.median(runs)}))
"""


def engine_calls(settings: Any, device: str) -> int:
    """Forward calls the engine makes after the first one (correctness, timing, post-check)."""
    calls = settings.correctness_trials - 1
    if device != "cpu" and settings.measure_performance:
        per_round = max(2, settings.perf_trials // settings.perf_rounds)
        calls += settings.perf_warmup + per_round  # round 0
        calls += (settings.perf_rounds - 1) * (1 + per_round)  # later rounds: 1 warmup each
        calls += 1  # correctness re-check after timing
    return calls


def own_time(problem: Any, device: str, runs: int) -> dict[str, float]:
    """The candidate's own import, first call and per-call time, in a fresh worker-like process."""
    with tempfile.TemporaryDirectory(prefix="tf-own-") as tmp:
        env = {
            k: v
            for k, v in os.environ.items()
            if k in ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_VISIBLE_DEVICES", "CC")
        }
        env.update(
            {
                "OMP_NUM_THREADS": "1",
                "MKL_NUM_THREADS": "1",
                "TRITON_CACHE_DIR": os.path.join(tmp, "triton-cache"),
                "HOME": tmp,
                "PYTHONPATH": os.pathsep.join(sys.path),
            }
        )
        if device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        spec = {
            "device": device if device == "cpu" else "cuda:0",
            "reference": problem.reference_src,
            "solution": problem.solution_src,
            "tmp": tmp,
            "runs": max(3, min(runs, 20)),
        }
        r = subprocess.run(
            [sys.executable, "-c", _OWN_SCRIPT],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        if r.returncode != 0:
            raise RuntimeError(f"own-time run of {problem.id} failed:\n{r.stderr[-3000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])


def pick(problems: list[Any], names: str | None, n: int) -> list[Any]:
    """Named problems, or `n` spread round-robin over categories (deterministic)."""
    if names:
        wanted = [x.strip() for x in names.split(",") if x.strip()]
        by_name = {p.name: p for p in problems}
        return [by_name[w] for w in wanted]
    cats: dict[str, list[Any]] = {}
    for p in problems:
        cats.setdefault(p.category, []).append(p)
    out: list[Any] = []
    i = 0
    while len(out) < min(n, len(problems)):
        for c in sorted(cats):
            if i < len(cats[c]) and len(out) < n:
                out.append(cats[c][i])
        i += 1
    return out


def timed_eval(ev: Any, problem: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    v = ev.evaluate(problem, problem.solution_src)
    return time.perf_counter() - t0, v


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from tritonforge.config.eval import EvalSettings
    from tritonforge.evaluation.judge.evaluator import Evaluator
    from tritonforge.problems import load_suite

    settings = EvalSettings(device=args.device, mode="strict", transport=args.transport)
    problems = pick(load_suite("builtin", size=args.size), args.problems, args.sample)
    calls = engine_calls(settings, args.device)
    rows: list[dict[str, Any]] = []
    with Evaluator(settings) as ev:
        cold_wall, cold_v = timed_eval(ev, problems[0])
        dev_key = next(iter(ev.started()))
        preload_s = ev.started()[dev_key].server.info.get("preload_s")
        for p in problems:
            own = own_time(p, args.device, calls)
            own_total = own["import_s"] + own["first_s"] + calls * own["run_s"]
            first_wall, v = (cold_wall, cold_v) if p is problems[0] else timed_eval(ev, p)
            before = dict(ev.transport_stats)
            warm = [timed_eval(ev, p) for _ in range(args.repeats)]
            transport = {k: n - before.get(k, 0) for k, n in ev.transport_stats.items()}
            warm_wall = statistics.median(w for w, _ in warm)
            rows.append(
                {
                    "problem": p.id,
                    "status": v.status.value,
                    "first_wall_s": round(first_wall, 4),
                    "warm_wall_s": round(warm_wall, 4),
                    "own_import_s": round(own["import_s"], 4),
                    "own_compile_s": round(own["first_s"], 4),
                    "own_run_s": round(own["run_s"], 5),
                    "own_total_s": round(own_total, 4),
                    "overhead_first_s": None
                    if p is problems[0]
                    else round(first_wall - own_total, 4),
                    "overhead_warm_s": round(warm_wall - own_total, 4),
                    "phase_seconds": warm[-1][1].phase_seconds,
                    "transport": {k: n for k, n in transport.items() if n},
                }
            )
            print(f"{p.id}: {json.dumps(rows[-1])}", file=sys.stderr)
            result = summarize(args, settings, calls, (problems[0], cold_wall, preload_s), rows)
            if args.out:  # after every problem: a time-boxed run keeps what it finished
                write(args.out, {**result, "finished": len(rows) == len(problems)})
    return result


def summarize(
    args: argparse.Namespace,
    settings: Any,
    calls: int,
    cold: tuple[Any, float, Any],
    rows: list[dict[str, Any]],
) -> dict[str, Any]:
    first, cold_wall, preload_s = cold
    warm_over = [r["overhead_warm_s"] for r in rows]
    first_over = [r["overhead_first_s"] for r in rows if r["overhead_first_s"] is not None]
    target = TARGET_S["cpu" if args.device == "cpu" else "cuda"]
    return {
        "benchmark": "eval_overhead",
        "device": args.device,
        "size": args.size,
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
        "settings": {
            "correctness_trials": settings.correctness_trials,
            "transport": settings.transport,
            "engine_calls_after_first": calls,
            "repeats": args.repeats,
        },
        "cold_start": {
            "problem": first.id,
            "wall_s": round(cold_wall, 3),
            "fork_server_preload_s": preload_s,
            "overhead_s": round(cold_wall - rows[0]["own_total_s"], 3),
        },
        "problems": rows,
        "median_overhead_warm_s": round(statistics.median(warm_over), 4),
        "median_overhead_first_s": round(statistics.median(first_over), 4) if first_over else None,
        "max_overhead_warm_s": round(max(warm_over), 4),
        "all_correct": all(r["status"] == "correct" for r in rows),
        "target_s": target,
        "meets_target": statistics.median(warm_over) <= target,
    }


def write(path: Path, result: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--size", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--sample", type=int, default=10, help="problems, spread over categories")
    ap.add_argument("--problems", default=None, help="comma-separated problem names instead")
    ap.add_argument("--repeats", type=int, default=3, help="warm evaluations per problem")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    ap.add_argument(
        "--transport",
        choices=["auto", "memfd"],
        default="auto",
        help="GPU data path (memfd: host memory only, the before figure)",
    )
    args = ap.parse_args(argv)
    result = measure(args)  # with --out, measure has written it (finished) after the last problem
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
