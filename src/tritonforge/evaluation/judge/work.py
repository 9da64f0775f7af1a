"""Hybrid mode's custom-kernel share, measured in work rather than time.

Covers: `op_work` (the work of one aten compute op from its input shapes and dtypes: bytes moved,
or FLOPs over a fixed machine balance for matmuls and convolutions, whichever is larger),
`ops_work` (a worker's or the reference's aggregated op list), `reference_work` (the reference's
own compute ops, profiled once in this trusted process with the same analysis the worker uses)
and `custom_share` = 1 - (work PyTorch did in the candidate) / (work of the whole reference),
clamped to [0, 1]. What the custom kernels did is never measured, so a kernel that spins, sleeps
or writes a huge useless buffer adds nothing, and a thread cannot help (none can be started):
only removing PyTorch work raises the share. Host compute the audit cannot see (numpy on host
memory) is tolerated only without a minimum share (decide.py).
Estimates, not measurements: output bytes are taken as the largest input's, a convolution's
output as its input's spatial size (stride 1), and unknown ops as elementwise.
Does not cover: the minimum-share rule (decide.py) or the profile itself (sandbox/audit_profile.py).
"""

from __future__ import annotations

import math
import threading
from contextlib import nullcontext
from typing import Any

import torch

from tritonforge.evaluation.sandbox.audit_profile import analyse

FLOPS_PER_BYTE = 16.0  # machine balance used to put FLOPs and bytes on one scale (fp32, GPU-ish)
_ITEMSIZE = {
    "float": 4,
    "float32": 4,
    "double": 8,
    "float64": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "float16": 2,
    "bfloat16": 2,
    "long int": 8,
    "int64": 8,
    "int": 4,
    "int32": 4,
    "bool": 1,
    "unsigned char": 1,
    "signed char": 1,
    "short int": 2,
}
_MATMUL = {"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul", "aten::linear"}
_CONV_PREFIX = ("aten::conv", "aten::_convolution", "aten::cudnn_convolution")


def _numel(shape: list[int]) -> int:
    return math.prod(shape) if shape else 0


def _matmul_flops(name: str, shapes: list[list[int]]) -> float:
    mats = [s for s in shapes if len(s) >= 2]
    if name == "aten::linear" and len(mats) >= 2:
        x, w = mats[0], mats[1]
        return 2.0 * _numel(x) * w[0]
    if name in ("aten::addmm", "aten::baddbmm") and len(mats) >= 3:
        mats = mats[1:]
    if len(mats) < 2:
        return 0.0
    a, b = mats[0], mats[1]
    batch = _numel(a[:-2]) if len(a) > 2 else 1
    return 2.0 * batch * a[-2] * a[-1] * b[-1]


def _conv_flops(shapes: list[list[int]]) -> float:
    if len(shapes) < 2 or len(shapes[0]) < 3 or len(shapes[1]) < 3:
        return 0.0
    x, w = shapes[0], shapes[1]
    spatial = _numel(x[2:])
    return 2.0 * x[0] * w[0] * spatial * _numel(w[1:])


def op_work(name: str, shapes: list[list[int]], dtypes: list[str]) -> float:
    """Work of one op in byte-equivalents (see the module docstring)."""
    sizes = [
        _numel(s) * _ITEMSIZE.get(dtypes[i] if i < len(dtypes) else "", 4)
        for i, s in enumerate(shapes)
    ]
    moved = float(sum(sizes) + (max(sizes) if sizes else 0))
    if name in _MATMUL:
        flops = _matmul_flops(name, shapes)
    elif name.startswith(_CONV_PREFIX):
        flops = _conv_flops(shapes)
    else:
        flops = 0.0
    return max(moved, flops / FLOPS_PER_BYTE)


def ops_work(op_shapes: Any) -> float:
    """Total work of an `op_shapes` list ([name, shapes, dtypes, count] entries); malformed
    entries (the list comes from the worker) count as nothing."""
    total = 0.0
    for entry in op_shapes if isinstance(op_shapes, list) else []:
        try:
            name, shapes, dtypes, count = entry
            shapes = [[int(d) for d in s] for s in shapes]
            total += op_work(str(name), shapes, [str(d) for d in dtypes]) * int(count)
        except (TypeError, ValueError):
            continue
    return total


def custom_share(candidate_ops: Any, reference: float | None) -> float | None:
    """1 - torch work / reference work, clamped; 1.0 when PyTorch computed nothing; None when the
    reference has no compute op to compare with."""
    done = ops_work(candidate_ops)
    if done <= 0:
        return 1.0
    if not reference:
        return None
    return min(1.0, max(0.0, 1.0 - done / reference))


_PROFILER = threading.Lock()  # torch's profiler is one per process: concurrent sessions crash


def reference_work(model: Any, inputs: list[Any], device: str) -> float:
    """The reference's own compute work on `inputs`, profiled here (trusted) like a candidate.
    One profiling at a time in the judge: two evaluation threads profiling at once ended the
    process with a segmentation fault (or lost each other's events) inside torch's profiler."""
    token = "reference"
    where = torch.cuda.device(device) if device.startswith("cuda") else nullcontext()
    with _PROFILER, where, torch.no_grad():
        with torch.autograd.profiler.profile(use_kineto=False, record_shapes=True) as prof:
            with torch.autograd.profiler.record_function(f"tf::forward::{token}"):
                model(*inputs)
    return ops_work(analyse(prof.function_events, token).shapes)
