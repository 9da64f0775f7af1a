"""The CUDA C++ backend (`backend = "cuda"`, candidates that build kernels with load_inline) on a
GPU (run with `pytest -m gpu tests/gpu`; needs nvcc and ninja, as torch.utils.cpp_extension does).

Covers: a correct CUDA C++ ReLU accepted in strict mode with a measured speedup and
`compiled` true; a CUDA source that does not compile reported as compile_error with nvcc's
message; a wrong kernel reported as numerical_mismatch. The extension is built inside the
sandboxed worker (its scratch holds the build), so the import budget is raised.
Does not cover: the static rules of the backend (tests/unit/test_checks.py) or the CPU refusal
(tests/eval).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.problems import load_suite
from tritonforge.types import Status

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

_TEMPLATE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] = @@BODY@@; }
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long n = xc.numel();
    int threads = 256;
    long blocks = (n + threads - 1) / threads;
    relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(
    name="tf_relu_@@NAME@@",
    cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
    cuda_sources=CUDA_SRC,
    functions=["relu_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_cuda(x)
'''


def candidate(body: str, name: str) -> str:
    return _TEMPLATE.replace("@@BODY@@", body).replace("@@NAME@@", name)


@pytest.fixture(scope="module")
def cuda_judge() -> Iterator[Evaluator]:
    s = EvalSettings(device="cuda", backend="cuda", correctness_trials=3, perf_trials=20)
    s.budgets.import_s = 300.0  # nvcc + ninja build the extension inside the worker
    with Evaluator(s) as ev:
        yield ev


@pytest.fixture(scope="module")
def relu():
    return next(p for p in load_suite("builtin", size="gpu") if p.name == "relu")


def test_correct_cuda_extension_is_accepted_and_timed(cuda_judge: Evaluator, relu) -> None:
    v = cuda_judge.evaluate(relu, candidate("v > 0.f ? v : 0.f", "ok"))
    detail = (
        f"{v.status.value} {v.rule} phase={v.phase}: {v.message[:1500]}\n{v.stderr_tail[-1500:]}"
    )
    assert v.status is Status.CORRECT, detail
    assert v.compiled and v.speedup is not None and v.speedup > 0, detail
    print(f"cuda backend relu: speedup {v.speedup:.3f}, phases {v.phase_seconds}")


def test_cuda_source_that_does_not_compile_is_a_compile_error(cuda_judge: Evaluator, relu) -> None:
    v = cuda_judge.evaluate(relu, candidate("v > 0.f ? v : undefined_name", "broken"))
    detail = f"{v.status.value} {v.rule} phase={v.phase}: {v.message[:1500]}"
    assert v.status is Status.COMPILE_ERROR, detail
    assert "undefined_name" in v.message, detail
    assert not v.compiled


def test_wrong_cuda_kernel_is_a_numerical_mismatch(cuda_judge: Evaluator, relu) -> None:
    v = cuda_judge.evaluate(relu, candidate("v", "wrong"))
    detail = f"{v.status.value} {v.rule} phase={v.phase}: {v.message[:1500]}"
    assert v.status is Status.NUMERICAL_MISMATCH, detail
    assert v.compiled, detail
