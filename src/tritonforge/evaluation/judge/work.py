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
output as its input's spatial size (stride 1). A candidate's op with no formula here (`priced`)
counts as infinite work (share 0: fail closed); the reference's, as the bytes it moves.
Does not cover: the minimum-share rule (decide.py) or the profile itself (sandbox/audit_profile.py).
"""

from __future__ import annotations

import functools
import math
import threading
from contextlib import nullcontext
from typing import Any

import torch

from tritonforge.evaluation.sandbox.audit_profile import analyse
from tritonforge.evaluation.sandbox.glue import classify_op

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
_MATMUL = {"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul", "aten::linear",
           "aten::_addmm_activation", "aten::addbmm", "aten::mv", "aten::addmv", "aten::dot",
           "aten::vdot", "aten::addr", "aten::outer", "aten::ger"}  # fmt: skip
_ATTENTION_PREFIX = ("aten::_scaled_dot_product", "aten::scaled_dot_product", "aten::_efficient_att",
                     "aten::_flash_attention")  # fmt: skip
_CONV_PREFIX = ("aten::conv", "aten::_convolution", "aten::cudnn_convolution",
                "aten::mkldnn_convolution", "aten::slow_conv", "aten::_slow_conv",
                "aten::thnn_conv", "aten::_conv_depthwise", "aten::miopen_convolution")  # fmt: skip
# ops whose work is the bytes they move: besides PyTorch's pointwise ops (their `pointwise` tag),
# reductions, normalisations, scans and data movement
_BYTES = {"sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "var_mean", "norm",
          "linalg_vector_norm", "logsumexp", "_softmax", "softmax", "_log_softmax", "log_softmax",
          "cumsum", "cumprod", "argmax", "argmin", "any", "all", "native_layer_norm",
          "layer_norm", "native_group_norm", "group_norm", "native_batch_norm",
          "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "batch_norm",
          "instance_norm", "_fused_rms_norm", "rms_norm", "where", "masked_fill", "index_select",
          "gather", "scatter", "scatter_add", "index", "index_put", "cat", "stack", "flip",
          "roll", "repeat", "constant_pad_nd", "reflection_pad1d", "reflection_pad2d",
          "replication_pad1d", "replication_pad2d", "embedding", "topk", "sort", "tril", "triu",
          "max_pool2d_with_indices", "max_pool1d", "max_pool2d", "max_pool3d",
          "max_pool3d_with_indices", "avg_pool1d", "avg_pool2d", "avg_pool3d",
          "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "_adaptive_avg_pool2d",
          "_adaptive_avg_pool3d", "adaptive_max_pool2d", "upsample_nearest2d", "upsample_bilinear2d",
          "_log_softmax_backward_data", "hardtanh", "clamp", "dropout", "native_dropout",
          "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
          "nll_loss_forward", "nll_loss2d_forward", "kl_div", "_foreach_add", "_foreach_mul",
          "_foreach_clamp_min", "_foreach_clamp_max", "_foreach_sub", "_foreach_div",
          "_foreach_exp", "_foreach_neg", "_foreach_abs", "_foreach_sqrt", "_foreach_maximum",
          "_foreach_minimum", "_foreach_pow", "_foreach_copy", "_foreach_addcmul",
          "_foreach_addcdiv", "_foreach_lerp", "_foreach_sign", "_foreach_tanh",
          "_foreach_sigmoid", "_foreach_log", "_foreach_zero", "_foreach_norm"}  # fmt: skip


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


def _attention_flops(shapes: list[list[int]]) -> float:
    """q @ k^T and p @ v of (..., Lq, D) x (..., Lk, D): 4 * batch * Lq * Lk * D."""
    mats = [s for s in shapes if len(s) >= 2]
    if len(mats) < 2:
        return 0.0
    q, k = mats[0], mats[1]
    return 4.0 * _numel(q[:-2]) * q[-2] * k[-2] * q[-1]


def priced(name: str) -> bool:
    """Whether `name` ('aten::op') has a cost formula here: FLOPs (matmuls, attention,
    convolutions) or bytes (PyTorch's pointwise ops, reductions, normalisations, scans, data
    movement)."""
    if name in _MATMUL or name.startswith(_ATTENTION_PREFIX + _CONV_PREFIX):
        return True
    base = name.split("::", 1)[-1].split(".", 1)[0]
    if base in _BYTES or base.rstrip("_") in _BYTES or classify_op(name) == "glue":
        return True
    return _pointwise(base.rstrip("_"))


@functools.lru_cache(maxsize=4096)
def _pointwise(base: str) -> bool:
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return False
    try:
        return any(torch.Tag.pointwise in getattr(packet, o).tags for o in packet.overloads())
    except (AttributeError, RuntimeError):
        return False


def op_work(name: str, shapes: list[list[int]], dtypes: list[str]) -> float:
    """Work of one op in byte-equivalents (see the module docstring)."""
    sizes = [
        _numel(s) * _ITEMSIZE.get(dtypes[i] if i < len(dtypes) else "", 4)
        for i, s in enumerate(shapes)
    ]
    moved = float(sum(sizes) + (max(sizes) if sizes else 0))
    if name in _MATMUL:
        flops = _matmul_flops(name, shapes)
    elif name.startswith(_ATTENTION_PREFIX):
        flops = _attention_flops(shapes)
    elif name.startswith(_CONV_PREFIX):
        flops = _conv_flops(shapes)
    else:
        flops = 0.0
    return max(moved, flops / FLOPS_PER_BYTE)


def ops_work(op_shapes: Any, unpriced: float = 0.0) -> float:
    """Total work of an `op_shapes` list ([name, shapes, dtypes, count] entries); an op with no
    cost formula here (`priced`) counts `unpriced` (the candidate's: infinite, so its share is
    0: an op that does a matmul under another name must not pass for bytes moved; the
    reference's: its bytes); malformed entries count as nothing."""
    total = 0.0
    for entry in op_shapes if isinstance(op_shapes, list) else []:
        try:
            name, shapes, dtypes, count = entry
            shapes = [[int(d) for d in s] for s in shapes]
            work = op_work(str(name), shapes, [str(d) for d in dtypes]) * int(count)
            total += work if priced(str(name)) else max(work, unpriced)
        except (TypeError, ValueError):
            continue
    return total


def custom_share(candidate_ops: Any, reference: float | None) -> float | None:
    """1 - torch work / reference work, clamped; 1.0 when PyTorch computed nothing; None when the
    reference has no compute op to compare with."""
    done = ops_work(candidate_ops, unpriced=math.inf)
    if done <= 0:
        return 1.0
    if not reference:
        return None
    if math.isinf(done):
        return 0.0
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
