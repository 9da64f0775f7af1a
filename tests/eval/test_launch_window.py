"""Candidate code run inside a launch entry, on the CPU interpreter in strict mode: every
candidate here must be rejected.

While a launch runs (`STATE.in_launch`), the tripwires and the output lineage are off: Triton's
own work there is not the candidate's. Candidate code must not run in that window:
- a callable grid (Triton calls it inside `JITFunction.run`) runs with the window closed
  (audit_launch._Grid): host compute through numpy and switching RecordFunction off from a grid
  are caught, and the grid it returned signs the launch;
- Inductor's `CachingAutotuner.run` is not a launch entry: it executes candidate-controlled code
  (the grid expressions of `inductor_meta`, e.g. FixedGrid's `fixed_grid` strings, with the real
  builtins), which must run under the tripwires (a launch entry there was tried and withdrawn);
- a kernel parameter named `stream` is signed like any other (a count passed through it that
  differs when the call is not observed is `launch_mismatch`);
- an effective grid that differs when the call is not observed is `launch_mismatch`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import helpers.hack_corpus as hc
from helpers.import_bypass import bypass_imports, structural_only
from tritonforge.evaluation.judge import evaluator as evaluator_module
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.types import Status

pytestmark = pytest.mark.slow

_META = (
    '{"kernel_name": "triton_poi_fused_k_0", "grid_type": "FixedGrid", '
    '"fixed_grid": [GRID, "1", "1"], "mutated_arg_names": [], "no_x_dim": False, '
    '"num_load": 1, "num_reduction": 0, "backend_hash": "0", "autotune_pointwise": False, '
    '"max_autotune": False, "max_autotune_pointwise": False, '
    '"are_deterministic_algorithms_enabled": False, "assert_indirect_indexing": True, '
    '"autotune_local_cache": False, "autotune_remote_cache": None, '
    '"force_disable_caches": True, "dynamic_scale_rblock": True, '
    '"min_split_scan_rblock": 256, "spill_threshold": 16, "store_cubin": False}'
)

_INDUCTOR_HEAD = """
import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch._inductor.runtime import triton_heuristics
from torch._inductor.runtime.hints import DeviceProperties

TM = {
    "signature": {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32"},
    "device": DeviceProperties.create(torch.device("cpu")),
    "constants": {},
    "configs": [],
}


def meta(GRID):
    return META


def decorate(grid, fn):
    return triton_heuristics.pointwise(
        size_hints={"x": 2048}, filename=__file__, triton_meta=TM,
        inductor_meta=meta(grid), min_elem_per_thread=0,
    )(fn)
""".replace("META", _META)

# FixedGrid's grid expression, exec'd inside the launch entry: relu on the host with numpy,
# written through the output's numpy view (no aten op; the Tensor.numpy tripwire is off there);
# the kernel writes nothing, the entry's snapshot credits the output to it.
INDUCTOR_HOST_NUMPY = (
    _INDUCTOR_HEAD
    + """
G = "(out_ptr0.numpy().__setitem__(Ellipsis, in_ptr0.numpy().clip(0.0)), 1)[1]"


@triton.jit
def triton_poi_fused_k_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK


k = decorate(G, triton_poi_fused_k_0)


class ModelNew(nn.Module):
    def forward(self, input_0):
        buf0 = torch.empty_like(input_0)
        k.run(input_0.contiguous(), buf0, input_0.numel(), stream=0)
        return buf0
"""
)

# The first launch's grid expression switches RecordFunction off (a profiler control: an
# `always` tripwire, off inside a launch), PyTorch computes relu unseen by the profiler, the
# second launch switches it back on and copies the result out (credited to the kernel).
INDUCTOR_RECORD_FUNCTION_OFF = (
    _INDUCTOR_HEAD
    + """
OFF = "(__import__('torch').autograd._enable_record_function(False), 1)[1]"
ON = "(__import__('torch').autograd._enable_record_function(True), 1)[1]"


@triton.jit
def triton_poi_fused_k_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    for start in range(0, xnumel, XBLOCK):
        xindex = start + tl.arange(0, XBLOCK)[:]
        xmask = xindex < xnumel
        tl.store(out_ptr0 + xindex, tl.load(in_ptr0 + xindex, xmask), xmask)


off = decorate(OFF, triton_poi_fused_k_0)
on = decorate(ON, triton_poi_fused_k_0)


class ModelNew(nn.Module):
    def forward(self, input_0):
        buf0 = torch.empty_like(input_0)
        off.run(input_0, buf0, 0, stream=0)
        y = torch.relu(input_0)
        on.run(y, buf0, input_0.numel(), stream=0)
        return buf0
"""
)

# The launch signature of the Inductor entry has no grid ("NoneType": run() takes none): the
# effective grid is computed inside the entry (here FixedGrid's expression, which asks whether
# the call is profiled) and the JIT launch that carries it passes through unsigned. Unprofiled
# calls (the caching check's first, every timed call) run one block of sixteen: on a GPU, a
# timing of a fraction of the work with the profiled calls' signature.
INDUCTOR_GRID_UNSIGNED = (
    _INDUCTOR_HEAD
    + """
G = "(-(-xnumel // 1024)) if __import__('torch').autograd._profiler_enabled() else 1"


@triton.jit
def triton_poi_fused_k_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * 1024 + tl.arange(0, 1024)
    xmask = xindex < xnumel
    tl.store(out_ptr0 + xindex, tl.maximum(tl.load(in_ptr0 + xindex, xmask), 0.0), xmask)


k = decorate(G, triton_poi_fused_k_0)


class ModelNew(nn.Module):
    def forward(self, input_0):
        buf0 = torch.empty_like(input_0)
        k.run(input_0, buf0, input_0.numel(), stream=0)
        return buf0
"""
)

_PLAIN_HEAD = """
import string
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def attr(obj, name):
    return string.Formatter().get_field("0." + name, (obj,), {})[0]
"""

# Pre-existing, same window: a callable grid runs inside JITFunction.run's entry.
GRID_HOST_NUMPY = (
    _PLAIN_HEAD
    + """

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)

        def grid(meta):
            out.numpy()[...] = x.numpy().clip(0.0)
            return (1,)

        copy_kernel[grid](x, out, 0, BLOCK=16)
        return out
"""
)

GRID_RECORD_FUNCTION_OFF = (
    _PLAIN_HEAD
    + """
REC = attr(torch.autograd, "_enable_record_" + "function")


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()

        def off(meta):
            REC(False)
            return (1,)

        def on(meta):
            REC(True)
            return (triton.cdiv(n, 1024),)

        copy_kernel[off](x, out, 0, BLOCK=16)
        y = torch.relu(x)
        copy_kernel[on](y, out, n, BLOCK=1024)
        return out
"""
)

# s9_profiler_aware_light_kernel with the element count in a kernel parameter named `stream`:
# same kernel, same grid, same count; unprofiled calls cover one element and PyTorch the rest.
STREAM_PARAMETER = """
import string
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, stream, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < stream
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def attr(obj, name):
    return string.Formatter().get_field("0." + name, (obj,), {})[0]


def PROBE(mod):
    return attr(mod, "_profiler_" + "enabled")


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        if PROBE(torch.autograd)():
            relu_kernel[grid](x, out, stream=n, BLOCK=1024)
            return out
        relu_kernel[grid](x, out, stream=1, BLOCK=1024)
        flat = out.view(-1)
        flat[1:] = torch.relu(x.reshape(-1)[1:])
        return out
"""

CASES = {
    # name: (source, the rules that would be right)
    "inductor_fixed_grid_host_numpy": (INDUCTOR_HOST_NUMPY, {"host_read"}),
    "inductor_fixed_grid_record_function_off": (
        INDUCTOR_RECORD_FUNCTION_OFF,
        {"profiler_tamper", "torch_compute"},
    ),
    "grid_callable_host_numpy_preexisting": (GRID_HOST_NUMPY, {"host_read"}),
    "grid_callable_record_function_off_preexisting": (
        GRID_RECORD_FUNCTION_OFF,
        {"profiler_tamper", "torch_compute"},
    ),
    "kernel_parameter_named_stream": (STREAM_PARAMETER, {"launch_mismatch"}),
    "inductor_effective_grid_unsigned": (INDUCTOR_GRID_UNSIGNED, {"launch_mismatch"}),
}


@pytest.fixture(scope="module")
def strict() -> Iterator[Evaluator]:
    with Evaluator(hc.base_settings("strict")) as ev:
        yield ev


# their `import string` is refused by the import allowlist first: judged by the runtime layers
# alone (static rules off, the import rewritten as a sys.modules lookup: helpers/import_bypass.py)
RUNTIME_ONLY = {
    "kernel_parameter_named_stream",
    "grid_callable_host_numpy_preexisting",
    "grid_callable_record_function_off_preexisting",
}


@pytest.mark.parametrize("name", list(CASES))
def test_review_attack_rejected(
    strict: Evaluator, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, rules = CASES[name]
    if name in RUNTIME_ONLY:
        monkeypatch.setattr(evaluator_module, "run_static", structural_only)
        source = bypass_imports(source)
    v = strict.evaluate(hc.problem("builtin/relu"), source, hc.base_settings("strict"))
    detail = f"{name}: {v.status.value} rule={v.rule}\n{v.message[:600]}"
    assert v.status is Status.REWARD_HACK, detail
    assert v.rule in rules, detail


GRID_GLUE_OUTPUT = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def touch_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[1], x.shape[0], dtype=x.dtype, device=x.device)

        def grid(meta):
            out.copy_(x.t())
            return (1,)

        touch_kernel[grid](out, 0, BLOCK=128)
        return out
"""


def test_output_written_by_a_callable_grid_is_not_the_kernels(strict: Evaluator) -> None:
    """A callable grid runs between a launch's two snapshots: a glue copy it makes into the
    output changed the output there, and was credited to a kernel that writes nothing (found
    by the attack review of the Inductor launcher record)."""
    settings = hc.base_settings("strict")
    v = strict.evaluate(hc.problem("ref:transpose_copy"), GRID_GLUE_OUTPUT, settings)
    detail = f"{v.status.value} rule={v.rule}\n{v.message[:600]}"
    assert v.status is Status.REWARD_HACK and v.rule == "output_not_from_kernel", detail
