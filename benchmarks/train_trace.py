"""Where one trainer step's device time and device idle time go (the fast path, one shape).

Profiles one step after warm-up (torch.profiler with shapes and Python stacks) and writes a
JSON with: the step's wall time, the device's busy time (union of kernel intervals), its idle
gaps of 20 us or more with the host operators that launched the kernel after each gap (where
the device waited for the host) grouped by that stack, the kernels' time by group (attention, matmul, lm head, inductor's
fused kernels, optimizer, copies, other) and by name, and the eager copies (`aten::copy_`)
grouped by their shapes and the stacks that issued them. The Chrome trace (gzipped, without
stacks) lands beside it when it is small enough to keep.

    python3 benchmarks/train_trace.py --shape 0.6b --head triton_keep --out OUT/trace.json  # GPU
    python3 benchmarks/train_trace.py --tiny --out /tmp/trace.json                           # CPU

Does not cover: timing across several steps (benchmarks/train_step.py does that).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import train_parts as tp

GAP_US = 20.0
GROUPS = (  # (group, substrings of a kernel's name), first match wins
    ("inductor", ("triton_poi_", "triton_per_", "triton_red_", "triton_tem_")),
    ("attention", ("sdpa", "fmha", "flash", "attention", "dot_do_o", "cudnn")),
    ("matmul", ("nvjet", "gemm", "cutlass", "xmma", "wgmma")),
    ("lm_head", ("_forward_kernel", "_grad_kernel")),  # its Triton passes (matmuls: matmul)
    ("optimizer", ("adam", "foreach", "multi_tensor")),
    ("copy", ("memcpy", "memset", "direct_copy", "catarraybatchedcopy")),
)


def _events(trace: dict) -> tuple[list[dict], dict[int, dict], list[dict]]:
    """(device kernels and copies sorted by start, launch events by correlation id, host ops)."""
    kernels, launches, host = [], {}, []
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            kernels.append(e)
        elif cat == "cuda_runtime" or cat == "cuda_driver":
            corr = e.get("args", {}).get("correlation")
            if corr is not None:
                launches[corr] = e
        elif cat in ("cpu_op", "python_function", "user_annotation"):
            host.append(e)
    kernels.sort(key=lambda e: e["ts"])
    return kernels, launches, host


def _stack_at(host: list[dict], tid: Any, ts: float, depth: int = 6) -> list[str]:
    """Names of the host events on thread `tid` that enclose time `ts`, outermost last."""
    inside = [e for e in host if e.get("tid") == tid and e["ts"] <= ts <= e["ts"] + e.get("dur", 0)]
    inside.sort(key=lambda e: e.get("dur", 0))
    names = []
    for e in inside:
        n = e["name"]
        if n not in names:
            names.append(n)
    return names[:depth]


def _copies(host: list[dict]) -> list[dict]:
    """Eager copies (`aten::copy_`) by input shapes and the host stack that issued them."""
    copies: dict[str, list[float]] = collections.defaultdict(list)
    for e in host:
        if e["name"] == "aten::copy_" and e.get("cat") == "cpu_op":
            dims = e.get("args", {}).get("Input Dims")
            stack = _stack_at(host, e.get("tid"), e["ts"] + 1e-3, depth=8)[1:]
            copies[f"{dims} < {' < '.join(stack)}"].append(e.get("dur", 0))
    rows = [{"n": len(v), "host_ms": round(sum(v) / 1e3, 3), "where": k[:600]}
            for k, v in copies.items()]  # fmt: skip
    return sorted(rows, key=lambda r: -r["n"])[:40]


def group_of(name: str) -> str:
    low = name.lower()
    return next((g for g, keys in GROUPS if any(k in low for k in keys)), "other")


def kernel_table(kernels: list[dict], top: int = 60) -> dict[str, Any]:
    """Device time by group (GROUPS, by kernel name) and by kernel name (the `top` largest).
    Kernels that overlap (several streams) count in full, so the sums can exceed busy time."""
    by_name: dict[str, list[float]] = collections.defaultdict(list)
    for k in kernels:
        by_name[k["name"]].append(k.get("dur", 0.0))
    by_group: dict[str, float] = collections.defaultdict(float)
    for name, durs in by_name.items():
        by_group[group_of(name)] += sum(durs)
    rows = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]
    return {
        "kernel_ms_by_group": {g: round(ms / 1e3, 2) for g, ms in
                               sorted(by_group.items(), key=lambda kv: -kv[1])},
        "top_kernels": [{"ms": round(sum(v) / 1e3, 3), "n": len(v), "group": group_of(k),
                         "name": k[:160]} for k, v in rows],
    }  # fmt: skip


def analyse(trace: dict, wall_s: float) -> dict[str, Any]:
    kernels, launches, host = _events(trace)
    out: dict[str, Any] = {"wall_s": round(wall_s, 4), "kernels": len(kernels),
                           "copies_by_shape_and_stack": _copies(host)}  # fmt: skip
    if not kernels:
        return out
    busy, gaps = 0.0, []
    cur_start, cur_end = kernels[0]["ts"], kernels[0]["ts"] + kernels[0].get("dur", 0)
    for k in kernels[1:]:
        s, e = k["ts"], k["ts"] + k.get("dur", 0)
        if s > cur_end:
            busy += cur_end - cur_start
            if s - cur_end >= GAP_US:
                gaps.append((s - cur_end, k))
            cur_start, cur_end = s, e
        else:
            cur_end = max(cur_end, e)
    busy += cur_end - cur_start
    span = kernels[-1]["ts"] + kernels[-1].get("dur", 0) - kernels[0]["ts"]
    by_stack: dict[str, list[float]] = collections.defaultdict(list)
    for gap, k in gaps:
        launch = launches.get(k.get("args", {}).get("correlation"))
        stack = _stack_at(host, launch["tid"], launch["ts"]) if launch else ["?"]
        by_stack[" < ".join([k["name"][:60], *stack])].append(gap)
    groups = sorted(by_stack.items(), key=lambda kv: -sum(kv[1]))
    return {
        **out,
        "device_span_ms": round(span / 1e3, 2),
        "device_busy_ms": round(busy / 1e3, 2),
        "device_idle_in_span_ms": round((span - busy) / 1e3, 2),
        **kernel_table(kernels),
        "before_first_kernel_and_after_last_ms": round(wall_s * 1e3 - span / 1e3, 2),
        "gaps_over_20us": len(gaps),
        "gap_ms_total": round(sum(g for g, _ in gaps) / 1e3, 2),
        "gaps_by_launch_stack": [
            {"ms": round(sum(v) / 1e3, 3), "n": len(v), "where": k[:600]} for k, v in groups[:40]
        ],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny model on CPU")
    p.add_argument("--shape", default="0.6b")
    p.add_argument("--head", default="triton_keep", help="lm head (batch.lm_head)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--compile", default=None, choices=["on", "off"], help="(default: on; --tiny off)"
    )
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    shape = "tiny" if a.tiny else a.shape
    device = torch.device("cuda" if torch.cuda.is_available() and not a.tiny else "cpu")
    samples, seq = (3, 64) if a.tiny else (8, 8192)
    args = argparse.Namespace(chunk=32 if a.tiny else 4096)
    v = {"compile": a.compile or ("off" if a.tiny else "on"), "micro_tokens": samples * seq, "uniform": "sdpa",
         "ragged": "loop", "where": "optimizer", "head": a.head, "chunk": 2 * args.chunk}  # fmt: skip
    from tritonforge.training.rl import RLTrainer

    config = tp.qwen3_config(shape)
    trainer = RLTrainer(tp.trainer_config(args, seq, v), model=tp.make_model(
        config, device, tp.param_dtype_of(v)))  # fmt: skip
    batch = tp.make_batch(samples, seq, seq // 16, config.vocab_size)
    for _ in range(a.warmup):
        trainer.train_step(batch)
    tp.sync(device)
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts, record_shapes=True, with_stack=True) as prof:
        t0 = time.perf_counter()
        trainer.train_step(batch)
        tp.sync(device)
        wall = time.perf_counter() - t0
    a.out.parent.mkdir(parents=True, exist_ok=True)
    raw = a.out.with_suffix(".trace.json")
    prof.export_chrome_trace(str(raw))
    trace = json.loads(raw.read_text())
    report = {"shape": shape, "settings": v, "device": str(device), **analyse(trace, wall)}
    a.out.write_text(json.dumps(report, indent=2) + "\n")
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("cat") != "python_function"]
    blob = gzip.compress(json.dumps(trace).encode())
    raw.unlink()
    if len(blob) < 15 * 2**20:
        a.out.with_suffix(".trace.json.gz").write_bytes(blob)
    print(json.dumps({k: report[k] for k in report if not isinstance(report[k], list)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
