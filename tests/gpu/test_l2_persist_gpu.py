"""Persisting L2 and the timing loop's flush on a GPU (run on the H200:
`pytest -m gpu tests/gpu/test_l2_persist_gpu.py -s`).

Covers: the driver's cuCtxResetPersistingL2Cache is found and succeeds on the device
(sandbox/l2_persist.py); a call whose stream carries an access-policy window with hitRatio 1
over its input (set through libcudart, as a candidate's CUDA extension can; karpathy/llm.c#851)
is timed like the same call without the window, since every flush resets persisting lines first;
with the reset switched off the window's call is faster on a device where persisting L2 works
(this half shows the test can fail; it is skipped where the hardware shows no effect); a CUDA
extension candidate that sets the window on its stream is judged with a speedup like the one
that does not. Does not cover: the CPU, where the reset is a no-op (tests/unit/test_l2_persist.py).
"""

from __future__ import annotations

import ctypes
import statistics
from collections.abc import Iterator

import pytest
import torch

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.evaluation.sandbox import l2_persist, timing_loop
from tritonforge.evaluation.sandbox.timing_loop import L2_FLUSH_BYTES, run_trials
from tritonforge.problems import load_suite
from tritonforge.types import Problem, Status

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

SYNC = getattr(torch._C, "_cuda_synchronize", lambda: None)
LIMIT_PERSISTING_L2 = 6  # cudaLimitPersistingL2CacheSize
ATTR_MAX_PERSISTING_L2 = 108  # cudaDevAttrMaxPersistingL2CacheSize
ATTR_ACCESS_POLICY_WINDOW = 1  # cudaStreamAttributeAccessPolicyWindow
PERSISTING, STREAMING = 2, 1  # cudaAccessProperty


class _Window(ctypes.Structure):
    _fields_ = [
        ("base_ptr", ctypes.c_void_p),
        ("num_bytes", ctypes.c_size_t),
        ("hitRatio", ctypes.c_float),
        ("hitProp", ctypes.c_int),
        ("missProp", ctypes.c_int),
    ]


class _AttrValue(ctypes.Union):  # cudaStreamAttrValue / cudaLaunchAttributeValue: 64 bytes
    _fields_ = [("accessPolicyWindow", _Window), ("pad", ctypes.c_char * 64)]


def _cudart() -> ctypes.CDLL:
    for name in ("libcudart.so.12", "libcudart.so.13", "libcudart.so.11.0", "libcudart.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    pytest.skip("no libcudart to set an access-policy window with")


def set_window(x: torch.Tensor | None) -> None:
    """Give the current stream a persisting window over `x` (None: clear it)."""
    rt = _cudart()
    found = ctypes.c_int(0)
    dev = torch.cuda.current_device()
    assert rt.cudaDeviceGetAttribute(ctypes.byref(found), ATTR_MAX_PERSISTING_L2, dev) == 0
    most = found.value
    if most <= 0:
        pytest.skip("the device has no persisting L2")
    assert rt.cudaDeviceSetLimit(LIMIT_PERSISTING_L2, ctypes.c_size_t(most)) == 0
    value = _AttrValue()
    if x is not None:
        n = min(x.numel() * x.element_size(), most)
        value.accessPolicyWindow = _Window(x.data_ptr(), n, 1.0, PERSISTING, STREAMING)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    assert rt.cudaStreamSetAttribute(stream, ATTR_ACCESS_POLICY_WINDOW, ctypes.byref(value)) == 0


@pytest.fixture(scope="module")
def data() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    props = torch.cuda.get_device_properties("cuda")
    n = max(1 << 20, props.L2_cache_size // 4 // 4)  # a quarter of L2, in fp32 elements
    x = torch.randn(n, device="cuda")
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    yield x, flush
    set_window(None)


def _median_ms(x: torch.Tensor, flush: torch.Tensor, window: bool) -> float:
    set_window(x if window else None)
    try:
        t = run_trials(torch.sum, [x], 5, 60, "cuda_events", flush, SYNC)
    finally:
        set_window(None)
    return statistics.median(t.times[1:])


def test_reset_is_found_and_succeeds() -> None:
    assert l2_persist.available()
    torch.zeros(1, device="cuda")  # a current context
    assert l2_persist.reset_persisting_l2()


def test_window_is_timed_like_no_window(data, monkeypatch) -> None:
    x, flush = data
    plain = _median_ms(x, flush, window=False)
    windowed = _median_ms(x, flush, window=True)
    print(f"persisting window, reset on: {windowed:.4f} ms vs {plain:.4f} ms")
    assert 0.85 <= windowed / plain <= 1.15, (windowed, plain)
    monkeypatch.setattr(timing_loop, "_RESET_L2", lambda: False)
    unreset = _median_ms(x, flush, window=True)
    print(f"persisting window, reset off: {unreset:.4f} ms vs {plain:.4f} ms")
    if unreset > 0.9 * plain:
        pytest.skip(f"no persisting effect measurable here ({unreset:.4f} vs {plain:.4f} ms)")
    assert unreset < 0.9 * windowed


_EXT = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu_kernel(const float* x, float* y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] = v > 0.f ? v : 0.f; }
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto stream = at::cuda::getCurrentCUDAStream();
    if (@@WINDOW@@) {
        int dev = 0;
        cudaGetDevice(&dev);
        int most = 0;
        cudaDeviceGetAttribute(&most, cudaDevAttrMaxPersistingL2CacheSize, dev);
        cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, most);
        cudaStreamAttrValue attr = {};
        attr.accessPolicyWindow.base_ptr = x.data_ptr();
        attr.accessPolicyWindow.num_bytes = std::min((size_t)most, (size_t)x.numel() * 4);
        attr.accessPolicyWindow.hitRatio = 1.0f;
        attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
        attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
        cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &attr);
    }
    auto y = torch::empty_like(x);
    long n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(name="tf_window_@@WINDOW@@", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                  cuda_sources=SRC, functions=["relu_cuda"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_cuda(x.contiguous())
'''


def test_window_candidate_is_timed_like_one_without() -> None:
    base = next(p for p in load_suite("builtin", size="gpu") if p.name == "relu")
    props = torch.cuda.get_device_properties("cuda")
    n = max(1 << 20, props.L2_cache_size // 4 // 4)
    src = base.reference_src.split("def get_inputs")[0] + (
        f"def get_inputs():\n    return [torch.randn({n})]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    problem = Problem(id="l2/relu_quarter_l2", suite="l2", name="relu_l2", reference_src=src)
    s = EvalSettings(device="cuda", backend="cuda", correctness_trials=3, perf_trials=50)
    s.budgets.import_s = 300.0
    with Evaluator(s) as ev:
        plain = ev.evaluate(problem, _EXT.replace("@@WINDOW@@", "0"))
        windowed = ev.evaluate(problem, _EXT.replace("@@WINDOW@@", "1"))
    for v in (plain, windowed):
        assert v.status is Status.CORRECT, f"{v.status.value} {v.rule}: {v.message[:800]}"
    print(f"relu with a persisting window: {windowed.speedup:.3f}x, without: {plain.speedup:.3f}x")
    assert windowed.speedup <= 1.15 * plain.speedup
