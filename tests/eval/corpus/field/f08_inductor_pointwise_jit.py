# KernelBook style (Inductor output, as KernelLLM writes it), CPU buffers: plain @triton.jit
# kernels, `grid` from the Inductor runtime, triton_helpers/libdevice inside the kernel, guards
# helpers for buffers and size checks, a `call(args)` wrapper. (tanh by exp: libdevice, which
# Inductor prints for tanh, exists only on a GPU; the CPU interpreter has no libdevice.)
import torch
import triton
import triton.language as tl
from torch._inductor.runtime.triton_heuristics import grid
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import libdevice
import torch.nn as nn
assert_size_stride = torch._C._dynamo.guards.assert_size_stride
empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor


@triton.jit
def triton_poi_fused_add_mul_relu_sigmoid_tanh_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + x0, xmask)
    tmp1 = tl.full([1], 0, tl.int32)
    tmp2 = triton_helpers.maximum(tmp1, tmp0)
    tmp3 = tl.sigmoid(tmp0)
    tmp4 = tmp2 * tmp3
    tmp5 = tl.exp(-2.0 * tl.abs(tmp0))
    tmp6 = tmp4 + tl.where(tmp0 < 0, -1.0, 1.0) * (1.0 - tmp5) / (1.0 + tmp5)
    tl.store(out_ptr0 + x0, tmp6, xmask)


def call(args):
    arg0_1, = args
    args.clear()
    assert_size_stride(arg0_1, (4, 4, 8, 16), (512, 128, 16, 1))
    buf0 = empty_strided_cpu((4, 4, 8, 16), (512, 128, 16, 1), torch.float32)
    triton_poi_fused_add_mul_relu_sigmoid_tanh_0[grid(2048)](arg0_1, buf0, 2048, XBLOCK=256)
    del arg0_1
    return reinterpret_tensor(buf0, (4, 4, 8, 16), (512, 128, 16, 1), 0),


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, input_0):
        arg0_1 = input_0
        output = call([arg0_1])
        return output[0]
