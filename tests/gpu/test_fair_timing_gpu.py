"""Fair timing and memory admission on a real GPU (run with `pytest -m gpu tests/gpu`).

Covers: a reference judged against itself is timed by CUDA events in both processes and its
speedup is 1.0 within noise, with an interval that covers it; the same kernel judged twice while
other evaluations run gives the same speedup; the torch.compile baseline is compiled and timed in
the sandboxed timing process; the footprint of a problem is measured from the allocator (a
reference with a temporary has a workspace); a candidate that asks for more memory than the
device has is `out_of_resources` with the figure, never `crash`; a problem larger than the budget
is `resource_limit`. Does not cover: the scheduling logic itself (CPU tests: tests/unit/
test_device_gate.py, test_admission.py, tests/eval/test_device_scheduling.py).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.problems import load_suite
from tritonforge.problems.kernelbench import self_candidate
from tritonforge.types import Problem, Status

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

WORKSPACE_REF = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return (x * 2.0 + 1.0).sum(dim=0)   # two full-size temporaries, a small output

def get_inputs():
    return [torch.randn(4096, 8192)]

def get_init_inputs():
    return []
"""
GREEDY = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        hog = torch.empty(1 << 45, dtype=torch.uint8, device=x.device)  # 32 TiB
        return torch.relu(x) + hog[0]
"""


@pytest.fixture(scope="module")
def suite() -> dict[str, Problem]:
    return {p.name: p for p in load_suite("builtin", size="gpu")}


def _gpu(**kw) -> EvalSettings:
    return EvalSettings(device="cuda", **kw)


def test_self_speedup_is_one_by_cuda_events(suite) -> None:
    p = suite["softmax"]
    with Evaluator(_gpu(mode="hybrid")) as ev:
        v = ev.evaluate(p, self_candidate(p.reference_src))
    assert v.status is Status.CORRECT, v.message
    assert v.timing_clock == "cuda_events"
    assert 0.93 <= v.speedup <= 1.07, v.speedup
    lo, hi = v.speedup_ci
    assert lo <= v.speedup <= hi and hi - lo < 0.2


def test_same_kernel_twice_under_load_agrees(suite) -> None:
    names = ["relu", "softmax", "layer_norm", "matmul_square", "conv2d", "gelu"]
    with Evaluator(_gpu()) as ev, ThreadPoolExecutor(4) as pool:
        jobs = [pool.submit(ev.evaluate, suite[n], suite[n].solution_src) for n in names]
        jobs += [pool.submit(ev.evaluate, suite["relu"], suite["relu"].solution_src)]
        verdicts = [j.result() for j in jobs]
        stats = ev.device_stats()["cuda:0"]
    assert all(v.status is Status.CORRECT for v in verdicts), [v.message for v in verdicts]
    first, again = verdicts[0].speedup, verdicts[-1].speedup
    assert abs(math.log(first / again)) < 0.05, (first, again)
    assert stats["timings"] >= len(jobs) and stats["peak_reserved"] <= stats["capacity"]


def test_compile_baseline_in_the_timing_process(suite) -> None:
    p = suite["gelu"]
    with Evaluator(_gpu(compile_baseline=True)) as ev:
        v = ev.evaluate(p, p.solution_src)
    assert v.status is Status.CORRECT, v.message
    assert v.speedup_vs_compile is not None and v.speedup_vs_compile_ci is not None
    assert v.ref_compile_runtime is not None and v.ref_compile_runtime.median_ms > 0


def test_footprint_measures_the_reference_workspace() -> None:
    p = Problem(id="t/ws", suite="t", name="ws", reference_src=WORKSPACE_REF)
    with Evaluator(_gpu(mode="hybrid", measure_performance=False)) as ev:
        v = ev.evaluate(p, self_candidate(WORKSPACE_REF))
        fp = ev.refs.reference(p, "cuda:0").footprint
    assert v.status is Status.CORRECT, v.message
    assert fp is not None and fp.measured
    assert fp.inputs == 4096 * 8192 * 4 and fp.outputs == 8192 * 4
    assert fp.workspace >= fp.inputs  # at least one full-size temporary


def test_footprint_excludes_the_determinism_check(suite) -> None:
    """ReLU needs no workspace: the second run and comparison of the determinism check (read
    into the peak once, 51 GiB of 'workspace' for KernelBench's 6 GiB ReLU) are not the
    reference's."""
    p = suite["relu"]
    with Evaluator(_gpu(mode="hybrid", measure_performance=False)) as ev:
        ev.evaluate(p, p.solution_src)
        fp = ev.refs.reference(p, "cuda:0").footprint
    assert fp is not None and fp.measured
    assert fp.workspace <= fp.outputs // 4 + (2 << 20), fp.describe()


def test_greedy_candidate_is_out_of_resources_with_the_figure(suite) -> None:
    with Evaluator(_gpu(mode="hybrid")) as ev:
        v = ev.evaluate(suite["relu"], GREEDY)
    assert v.status is Status.OUT_OF_RESOURCES, (v.status, v.message)
    assert "tried to allocate 32768.00 GiB" in v.message or "out of device memory" in v.message


def test_problem_over_the_budget_is_resource_limit(suite) -> None:
    with Evaluator(_gpu(device_memory_gib=1.0)) as ev:
        v = ev.evaluate(suite["relu"], suite["relu"].solution_src)  # 0.5 GiB in + 0.5 GiB out
    assert v.status is Status.RESOURCE_LIMIT and "needs" in v.message
