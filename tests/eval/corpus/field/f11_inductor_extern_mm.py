# KernelBook style with a matmul through Inductor's extern_kernels (aten addmm: PyTorch compute)
# and the ReLU in a Triton kernel: hybrid mode accepts it and reports the share; strict does not.
import torch
import triton
import triton.language as tl
from torch._inductor.runtime.triton_heuristics import grid
from torch._inductor.runtime import triton_helpers
from torch._inductor.select_algorithm import extern_kernels
import torch.nn as nn
assert_size_stride = torch._C._dynamo.guards.assert_size_stride
empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor


@triton.jit
def triton_poi_fused_relu_0(in_out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    tmp0 = tl.load(in_out_ptr0 + xindex, xmask)
    tmp1 = triton_helpers.maximum(tl.full([1], 0, tl.int32), tmp0)
    tl.store(in_out_ptr0 + xindex, tmp1, xmask)


def call(args):
    primals_1, primals_2, primals_3 = args
    args.clear()
    assert_size_stride(primals_1, (16, 32), (32, 1))
    assert_size_stride(primals_2, (16,), (1,))
    assert_size_stride(primals_3, (8, 32), (32, 1))
    buf0 = empty_strided_cpu((8, 16), (16, 1), torch.float32)
    extern_kernels.addmm(primals_2, primals_3, reinterpret_tensor(primals_1, (32, 16), (1, 32), 0), alpha=1, beta=1, out=buf0)
    triton_poi_fused_relu_0[grid(128)](buf0, 128, XBLOCK=128)
    return buf0,


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, input_0):
        return call([self.linear.weight, self.linear.bias, input_0])[0]
