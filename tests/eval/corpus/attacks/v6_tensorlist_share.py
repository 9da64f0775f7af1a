"""Round 3, class 6 (hybrid share): TensorList ops (`_foreach_*`) counted as no work made the
custom-kernel share 1.0 with no custom compute. The share now comes from the replayed recipe,
where a TensorList op's work counts every tensor it touches."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        rows = list(x.reshape(-1, x.shape[-1]).unbind(0))
        relu = torch._foreach_clamp_min(rows, 0.0)
        y = torch.stack(relu).reshape(x.shape)
        out = torch.empty_like(y)
        copy_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
        return out
