"""Hybrid mode and the sealed worker on a CUDA device (run on the H200: `pytest -m gpu
tests/gpu/test_hybrid_gpu.py`).

Covers: the regression of the `profiler_tamper: expected one forward marker, found 2` verdicts on
honest hybrid candidates (a Kineto profile on CUDA holds a user marker once on the CPU and again
per GPU stream annotation: the forward marker must be matched on the CPU side only); honest
candidates accepted in hybrid mode on the GPU with the share measured in work (a half-Triton
SiLU strictly between 0 and 1, a pure-PyTorch one 0, an all-Triton layer norm 1); Triton compiles
and launches under the worker's seccomp filter (no new thread after start-up) in both modes, with
the worker's thread count at load reported. Does not cover: the CPU logic of the same code
(tests/unit/test_audit_profile.py), the attack corpus on the GPU (test_attacks_gpu.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from helpers import hack_corpus as hc
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.evaluation.sandbox.audit_profile import analyse, forward_roots
from tritonforge.types import Status

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TOKEN = "feedfacecafebeef"


def test_kineto_on_cuda_marker_matched_on_the_cpu_side() -> None:
    """The events the old hybrid audit read: more than one event carries the marker's name on
    CUDA; exactly one of them is on the CPU, and the analysis finds the ops under it."""
    record = torch._C._profiler._RecordFunctionFast
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    x = torch.randn(1 << 16, device="cuda")
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        with record(f"tf::forward::{TOKEN}"):
            torch.relu(x)
            torch.cuda.synchronize()
    events = list(prof.events())
    named = [e for e in events if e.name == f"tf::forward::{TOKEN}"]
    roots = forward_roots(events, TOKEN)
    p = analyse(events, TOKEN)
    print(f"marker events: {len(named)}, CPU-side: {len(roots)}")  # 2+ and 1 on the H200
    assert len(roots) == 1 and p.roots == 1, [(e.name, str(e.device_type)) for e in named]
    assert p.ops.get("aten::relu") == 1


@pytest.fixture(scope="module")
def hybrid_gpu() -> Iterator[Evaluator]:
    with Evaluator(hc.base_settings("hybrid", device="cuda")) as ev:
        yield ev


def _judge(ev: Evaluator, source: str, problem: str, mode: str = "hybrid"):
    s = hc.base_settings(mode, device="cuda")
    v = ev.evaluate(hc.problem(problem), source, s)
    detail = f"{v.status.value} rule={v.rule} phase={v.phase} notes={v.notes}\n{v.message[:800]}"
    return v, detail


def test_half_triton_share_by_work_on_gpu(hybrid_gpu: Evaluator) -> None:
    source = (hc.CORPUS / "hybrid" / "half_triton_silu.py").read_text()
    v, detail = _judge(hybrid_gpu, source, "builtin/silu")
    assert v.status is Status.CORRECT, detail
    assert v.audit is not None and v.audit.share_basis == "work", detail
    assert 0.0 < v.audit.custom_share < 1.0, detail
    assert v.speedup is not None, detail  # timed, with every timed call's signature checked


def test_pure_torch_and_all_triton_shares_on_gpu(hybrid_gpu: Evaluator) -> None:
    pure = next(c for c in hc.cases("attacks") if c["file"] == "c1_pure_torch.py")
    v, detail = _judge(hybrid_gpu, pure["source"], pure["problem"])
    assert v.status is Status.CORRECT and v.audit.custom_share == 0.0, detail
    norm = next(c for c in hc.cases("legit") if c["file"].startswith("l18_layernorm"))
    v, detail = _judge(hybrid_gpu, norm["source"], norm["problem"])
    assert v.status is Status.CORRECT and v.audit.custom_share == 1.0, detail


@pytest.mark.parametrize("mode", ["strict", "hybrid"])
def test_triton_compiles_under_the_thread_block(hybrid_gpu: Evaluator, mode: str) -> None:
    """A fresh kernel (compiled in the worker: MLIR passes, ptxas, the launcher's C build) after
    the seccomp filter refuses new threads; the sandbox notes carry no seccomp warning."""
    case = next(c for c in hc.cases("legit") if c["file"].startswith("l01_softmax"))
    v, detail = _judge(hybrid_gpu, case["source"], case["problem"], mode)
    assert v.status is Status.CORRECT, detail
    assert not any("seccomp" in n for n in v.notes), v.notes
