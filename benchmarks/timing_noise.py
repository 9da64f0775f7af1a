"""Benchmark (GPU): where the between-judgement noise of a timing comes from.

Each judgement times its reference and candidate on fresh device copies of the timing inputs,
right after the device may have idled. This probe separates those effects for a few memory-bound
and reduction ops at the built-in suite's gpu sizes, with the evaluator's own timing loop
(sandbox/timing_loop.py `run_trials`, L2 flush, the `cuda_events` clock):
- `same`: one input allocation timed `--repeats` times (the loop's own spread);
- `fresh`: a fresh input (and output) allocation for each of `--repeats` timings;
- `idle`: a timing right after `--idle-s` seconds without device work, against a hot one.
Figure per op and mode: the spread of the timings' medians, max/min - 1.

GPU (H200): python benchmarks/timing_noise.py --out docs/bench/h200_timing_noise.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import bench_common as bc
import torch

from tritonforge.evaluation.sandbox.timing_loop import L2_FLUSH_BYTES, run_trials

SHAPE = (16384, 8192)  # the built-in suite's gpu size of its elementwise problems
OPS = {
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "sum_dim1": lambda x: x.sum(dim=1),
    "softmax": lambda x: torch.softmax(x, dim=1),
}


def _median_ms(fn: Any, x: torch.Tensor, flush: torch.Tensor, args: argparse.Namespace) -> float:
    timed = run_trials(fn, [x], 5, args.trials, "cuda_events", flush, torch.cuda.synchronize)
    return statistics.median(timed.times[1:])


def _spread(xs: list[float]) -> float:
    return round(max(xs) / min(xs) - 1.0, 4)


def probe(name: str, fn: Any, flush: torch.Tensor, args: argparse.Namespace) -> dict[str, Any]:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(SHAPE, device="cuda", generator=g)
    same = [_median_ms(fn, x, flush, args) for _ in range(args.repeats)]
    fresh, keep = [], []
    for i in range(args.repeats):
        keep.append(torch.empty(1 << (20 + i % 4), device="cuda"))  # shift the allocator
        y = x.clone()
        fresh.append(_median_ms(fn, y, flush, args))
        del y
    idle, hot = [], []
    for _ in range(max(2, args.repeats // 3)):
        torch.cuda.synchronize()
        time.sleep(args.idle_s)
        idle.append(_median_ms(fn, x, flush, args))
        hot.append(_median_ms(fn, x, flush, args))
    row = {"op": name, "same_ms": same, "fresh_ms": fresh, "idle_ms": idle, "hot_ms": hot}
    row.update({f"{k}_spread": _spread(row[f"{k}_ms"]) for k in ("same", "fresh", "idle", "hot")})
    row["idle_over_hot"] = round(statistics.median(idle) / statistics.median(hot), 4)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/bench/h200_timing_noise.json"))
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--idle-s", type=float, default=1.0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("timing_noise needs a CUDA device", file=sys.stderr)
        return 2
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    t0 = time.monotonic()
    rows = []
    for name, fn in OPS.items():
        rows.append(probe(name, fn, flush, args))
        print(json.dumps({k: v for k, v in rows[-1].items() if not k.endswith("_ms")}))
    doc = {
        "benchmark": "timing_noise",
        "clock": "cuda_events",
        "shape": list(SHAPE),
        "repeats": args.repeats,
        "trials": args.trials,
        "idle_s": args.idle_s,
        "environment": bc.environment("cuda:0"),
        "wall_s": round(time.monotonic() - t0, 2),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
