"""Reading one forward's profile (sandbox/audit_profile.py) and hybrid mode's share by work
(judge/work.py), on recorded-style event lists and on real CPU profiles.

Covers: the forward marker matched among CPU-side events only (a Kineto profile on CUDA repeats a
user marker once per GPU stream annotation: the bug that called honest hybrid candidates
`profiler_tamper`), exactly one marker required, compute vs glue counting at the top level,
our own marker skipped, compute under a launch marker reported, op shapes aggregated; the work
of matmul, convolution and elementwise ops; the share 1 - torch work / reference work, clamped,
for a pure-PyTorch, a half-Triton and a spinning-kernel candidate; the reference's work profiled
in process. Does not cover: the GPU itself (tests/gpu/test_hybrid_gpu.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from tritonforge.evaluation.judge.work import (
    FLOPS_PER_BYTE,
    custom_share,
    op_work,
    ops_work,
    reference_work,
)
from tritonforge.evaluation.sandbox.audit_profile import analyse, forward_roots

TOKEN = "0123456789abcdef"


@dataclass
class Ev:
    """The fields of a profiler event the analysis reads."""

    name: str
    device_type: Any = "DeviceType.CPU"
    cpu_children: list[Any] = field(default_factory=list)
    input_shapes: list[Any] = field(default_factory=list)
    input_dtypes: list[str] = field(default_factory=list)


def fwd(*children: Ev, device: str = "DeviceType.CPU") -> Ev:
    return Ev(f"tf::forward::{TOKEN}", device, list(children))


def kineto_style_cuda_profile() -> list[Ev]:
    """As recorded on the H200: the marker once on the CPU, then again per GPU stream."""
    relu = Ev("aten::relu", input_shapes=[[8, 4]], input_dtypes=["float"])
    launch = Ev(f"tf::launch::{TOKEN}", cpu_children=[Ev("aten::empty_strided")])
    root = fwd(Ev("aten::empty_like"), relu, launch)
    gpu_marks = [fwd(device="DeviceType.CUDA"), fwd(device="DeviceType.CUDA")]
    kernels = [Ev("triton_relu", "DeviceType.CUDA"), Ev("void at::vectorized", "DeviceType.CUDA")]
    return [root, *root.cpu_children, *gpu_marks, *kernels]


def test_marker_matched_on_the_cpu_side_only() -> None:
    events = kineto_style_cuda_profile()
    assert len([e for e in events if e.name == f"tf::forward::{TOKEN}"]) == 3  # the old count
    assert len(forward_roots(events, TOKEN)) == 1
    p = analyse(events, TOKEN)
    assert p.roots == 1 and p.ops == {"aten::relu": 1} and p.glue == {"aten::empty_like": 1}
    assert p.shapes == [["aten::relu", [[8, 4]], ["float"], 1]] and p.in_launch == []


def test_missing_or_forged_markers_are_counted() -> None:
    assert analyse([Ev("aten::relu")], TOKEN).roots == 0
    two = analyse([fwd(), fwd()], TOKEN)  # two CPU-side markers: someone made one
    assert two.roots == 2 and two.ops == {}
    assert analyse([fwd(device=None)], TOKEN).roots == 1  # legacy events carry no device type


def test_own_marker_skipped_and_compute_inside_a_launch_reported() -> None:
    own = Ev(f"tf::audit::{TOKEN}", cpu_children=[Ev("aten::eq"), Ev("aten::clone")])
    launch = Ev(f"tf::launch::{TOKEN}", cpu_children=[Ev("x", cpu_children=[Ev("aten::add")])])
    guessed = Ev("tf::audit::0000000000000000", cpu_children=[Ev("aten::relu")])
    p = analyse([fwd(own, launch, guessed, Ev("aten::relu"))], TOKEN)
    assert p.ops == {"aten::relu": 2}  # a guessed marker name hides nothing
    assert p.in_launch == ["aten::add"]


def test_op_shapes_aggregated_by_signature() -> None:
    ops = [Ev("aten::add", input_shapes=[[4], [4]], input_dtypes=["float", "float"])] * 3
    p = analyse([fwd(*ops, Ev("aten::mul", input_shapes=[[2]]))], TOKEN)
    assert ["aten::add", [[4], [4]], ["float", "float"], 3] in p.shapes and len(p.shapes) == 2


def test_real_cpu_profile_with_the_fast_marker() -> None:
    record = torch._C._profiler._RecordFunctionFast
    x = torch.randn(16, 8)
    with torch.autograd.profiler.profile(use_kineto=False, record_shapes=True) as prof:
        with record(f"tf::forward::{TOKEN}"):
            y = torch.relu(x).clone()
            with record(f"tf::audit::{TOKEN}"):
                y.sum()
    p = analyse(prof.function_events, TOKEN)
    assert p.roots == 1 and p.ops == {"aten::relu": 1} and "aten::clone" in p.glue
    assert p.shapes[0][:2] == ["aten::relu", [[16, 8]]]


def test_op_work_estimates() -> None:
    assert op_work("aten::relu", [[1024]], ["float"]) == 1024 * 4 * 2  # read + write
    assert op_work("aten::add", [[10], [10]], ["c10::Half", "c10::Half"]) == 60
    mm = op_work("aten::mm", [[256, 512], [512, 128]], ["float", "float"])
    assert mm == pytest.approx(2 * 256 * 512 * 128 / FLOPS_PER_BYTE)
    conv = op_work("aten::conv2d", [[1, 3, 32, 32], [16, 3, 3, 3]], ["float", "float"])
    assert conv == pytest.approx(2 * 16 * 32 * 32 * 27 / FLOPS_PER_BYTE)
    assert ops_work([["aten::relu", [[4]], ["float"], 2], "junk", ["x", "y"]]) == 64


def test_share_is_work_not_time() -> None:
    ref = ops_work([["aten::sigmoid", [[100]], ["float"], 1], ["aten::mul", [[100], [100]], [], 1]])
    half = [["aten::sigmoid", [[100]], ["float"], 1]]  # the Triton kernel did the multiply
    assert custom_share(half, ref) == pytest.approx(1 - 800 / ref)
    everything = [["aten::sigmoid", [[100]], [], 1], ["aten::mul", [[100], [100]], [], 1]]
    assert custom_share(everything, ref) == 0.0  # a kernel spinning beside it adds nothing
    assert custom_share(everything * 3, ref) == 0.0  # clamped
    assert custom_share([], ref) == 1.0 and custom_share(half, None) is None


def test_reference_work_profiled_in_process() -> None:
    class Silu(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * torch.sigmoid(x)

    work = reference_work(Silu(), [torch.randn(64, 32)], "cpu")
    expected = op_work("aten::sigmoid", [[64, 32]], ["float"]) + op_work(
        "aten::mul", [[64, 32], [64, 32]], ["float", "float"]
    )
    assert work == pytest.approx(expected)
