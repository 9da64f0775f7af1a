"""Round 3, class 7 (GPU): a CUDA graph captured in __init__ replays cuBLAS with no aten op
recorded, into a static buffer that a Triton kernel then copies to the output. The replay of the
recorded work has the static buffer as a constant (the recording call's product), not the
graph: its outputs are wrong for fresh inputs."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.graph = None

    def _capture(self, a, b):
        self.a, self.b = a.clone(), b.clone()
        self.graph = torch.cuda.CUDAGraph()
        torch.mm(self.a, self.b)  # warm cuBLAS outside the capture
        with torch.cuda.graph(self.graph):
            self.c = torch.mm(self.a, self.b)

    def forward(self, a, b):
        if self.graph is None:
            self._capture(a, b)
        self.a.copy_(a)
        self.b.copy_(b)
        self.graph.replay()
        out = torch.empty_like(self.c)
        n = out.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](self.c, out, n, BLOCK=1024)
        return out
