"""The candidate's timed calls are audited in the shared timing loop (CPU, `time_on_cpu`).

Covers, through `Evaluator.evaluate` with real workers and the real timing process (the timing
path runs on the CPU; its numbers mean nothing here): a candidate that is honest in every
profiled call (correctness trials, the caching check, the re-check right after timing) and
launches differently only in the timed calls is `launch_mismatch` (timing_loop.py reports each
timed call's launch signature, gpu_timing.py compares them with the profiled calls'); one that
returns a tensor subclass only in timed calls is `output_type`; an honest kernel is timed on both
sides and accepted. The call counts follow `hc.cpu_timing_settings` (2 correctness trials, the last
one calling forward twice; 2 rounds of 1 warmup + 4 trials; the re-check). Does not cover: the
GPU (tests/gpu/test_attacks_gpu.py, s6/s9 timed attacks).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import helpers.hack_corpus as hc
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.problems import load_suite
from tritonforge.types import Problem, Status

pytestmark = pytest.mark.slow

# calls 1-3: correctness (trial 1; trial 2's caching-check call and its audited call);
# 4-13: the two timing rounds (warmup + 4 timed calls each); 14: the re-check after timing
TIMED = "4 <= self.calls <= 13"
KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class Sub(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        timed = TIMED_TEST
        out = torch.empty_like(x)
        n = x.numel()
        block = BLOCK_WHEN_TIMED if timed else 1024
        relu_kernel[(triton.cdiv(n, block),)](x, out, n, BLOCK=block)
        return out.as_subclass(Sub) if timed and SUBCLASS_WHEN_TIMED else out
"""


def _source(block_when_timed: int, subclass_when_timed: bool) -> str:
    return (
        KERNEL.replace("TIMED_TEST", TIMED)
        .replace("BLOCK_WHEN_TIMED", str(block_when_timed))
        .replace("SUBCLASS_WHEN_TIMED", str(subclass_when_timed))
    )


@pytest.fixture(scope="module")
def relu() -> Problem:
    return next(p for p in load_suite("builtin", size="cpu") if p.name == "relu")


@pytest.fixture(scope="module")
def ev() -> Iterator[Evaluator]:
    with Evaluator(hc.cpu_timing_settings(bootstrap_samples=100)) as e:
        yield e


def test_honest_kernel_is_timed_and_accepted(ev: Evaluator, relu: Problem) -> None:
    v = ev.evaluate(relu, _source(1024, False))
    assert v.status is Status.CORRECT, v.message
    assert v.runtime is not None and v.ref_runtime is not None and v.speedup is not None


def test_timed_calls_that_launch_differently_are_launch_mismatch(
    ev: Evaluator, relu: Problem
) -> None:
    v = ev.evaluate(relu, _source(256, False))
    assert v.status is Status.REWARD_HACK and v.rule == "launch_mismatch", v.message
    assert "timed calls launched different kernels or arguments" in v.message
    assert "8 of 9" in v.message  # every timed call; the re-check after timing was honest


def test_timed_calls_must_return_plain_tensors(ev: Evaluator, relu: Problem) -> None:
    v = ev.evaluate(relu, _source(1024, True))
    assert v.status is Status.REWARD_HACK and v.rule == "output_type", v.message
    assert v.phase == "timing"
