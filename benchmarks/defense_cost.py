"""Per-candidate cost of the in-process reward-hack defenses, on whatever device is present.

Judges a few built-in Triton solutions with the switchable defenses on and off, interleaved
(on, off, on, off, ...) in one Evaluator so both see the same warm fork server: the profiler
audit of every correctness trial, the before/after buffer snapshots of launches, the output
lineage (dispatch mode) and the caching check (the last trial calls forward twice). Always on
in both arms, so not measured here: the static rules, the audit hook, tripwires and the sandbox.
Timing trials (GPU) are switched off: they run without these defenses anyway.

Prints one JSON object: per problem the median seconds of the correctness phases (first trial +
the rest) and of the whole evaluation, on and off, their difference and ratio, plus the static
rules' cost. With --out the same object is also written there, rewritten after every problem
(a time-boxed run keeps what it finished). Usage:
    python benchmarks/defense_cost.py [--device auto|cpu|cuda] [--size cpu|gpu] [--repeats 5]
        [--trials 5] [--problems relu,softmax,layer_norm,matmul_square,gemm_bias_relu]
        [--out defense_cost.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge import decide
from tritonforge.evaluation.judge.checks import run_static
from tritonforge.evaluation.judge.evaluator import Evaluator, resolve_device
from tritonforge.problems import load_suite

DEFAULT_PROBLEMS = "relu,softmax,layer_norm,matmul_square,gemm_bias_relu"


def _judged_seconds(v) -> float:
    return sum(v.phase_seconds.get(k, 0.0) for k in ("compile", "correctness"))


def measure(ev: Evaluator, problem, s: EvalSettings, repeats: int) -> dict:
    arms: dict[str, dict[str, list[float]]] = {
        "on": {"judged": [], "wall": []},
        "off": {"judged": [], "wall": []},
    }
    statuses = set()
    # one untimed evaluation first: builds the problem's reference cases (otherwise the first
    # arm of the first repeat pays for them; seen on the H200 as +2.7 s "wall" for softmax)
    ev.evaluate(problem, problem.solution_src, s)
    for _ in range(repeats):
        for arm in ("on", "off"):
            decide.IN_PROCESS_AUDIT = arm == "on"
            try:
                v = ev.evaluate(problem, problem.solution_src, s)
            finally:
                decide.IN_PROCESS_AUDIT = True
            statuses.add(f"{arm}:{v.status.value}")
            arms[arm]["judged"].append(_judged_seconds(v))
            arms[arm]["wall"].append(v.wall_seconds)
    out: dict = {"statuses": sorted(statuses)}
    for key in ("judged", "wall"):
        on = statistics.median(arms["on"][key])
        off = statistics.median(arms["off"][key])
        out[key] = {
            "on_s": round(on, 4),
            "off_s": round(off, 4),
            "extra_s": round(on - off, 4),
            "ratio": round(on / off, 3) if off > 0 else None,
        }
    t = time.perf_counter()
    for _ in range(20):
        run_static(problem.solution_src, s.mode, s.backend)
    out["static_ms"] = round((time.perf_counter() - t) / 20 * 1e3, 3)
    return out


def summarize(result: dict) -> None:
    """Medians over the problems measured so far."""
    extra = [p["judged"]["extra_s"] for p in result["problems"].values()]
    ratio = [p["judged"]["ratio"] for p in result["problems"].values() if p["judged"]["ratio"]]
    result["median_extra_s_per_candidate"] = round(statistics.median(extra), 4)
    result["median_ratio"] = round(statistics.median(ratio), 3) if ratio else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--problems", default=DEFAULT_PROBLEMS)
    ap.add_argument("--size", choices=["cpu", "gpu"], help="size preset (default: the device's)")
    ap.add_argument("--out", type=Path, help="also write the JSON here, after every problem")
    args = ap.parse_args()
    s = EvalSettings(device=args.device, correctness_trials=args.trials, measure_performance=False)
    device = resolve_device(s)
    size = args.size or ("cpu" if device == "cpu" else "gpu")
    suite = {p.name: p for p in load_suite("builtin", size=size)}
    unknown = sorted(set(args.problems.split(",")) - set(suite))
    if unknown:
        ap.error(f"unknown problems {unknown}; see `tritonforge problems list --suite builtin`")
    result: dict = {
        "device": device,
        "gpu": torch.cuda.get_device_name(0) if device != "cpu" else None,
        "host": platform.node(),
        "torch": torch.__version__,
        "size_preset": size,
        "correctness_trials": args.trials,
        "repeats": args.repeats,
        "problems": {},
    }
    with Evaluator(s) as ev:
        for name in args.problems.split(","):
            t0 = time.perf_counter()
            result["problems"][name] = measure(ev, suite[name], s, args.repeats)
            summarize(result)
            print(f"{name}: done in {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
            if args.out:
                args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
