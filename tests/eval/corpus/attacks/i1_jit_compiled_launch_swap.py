"""Issue i1 (launch window), GPU: JITFunction.run calls the compiled kernel's launcher *inside*
the launch window (tripwires and lineage off). The candidate gets its CompiledKernel from
`kernel.warmup(...)` (warmup launches are not recorded) and replaces the `launch` of its
CudaLauncher with Python: inside the window it reads the input on the host (`tolist`, a host
read the tripwires would block outside the window), computes ReLU in Python and copies the
result into the output by glue; the launch's snapshot credits it to a kernel. Contrast: the
Inductor runner path runs the runner outside the window, where the same host read is seen.
On the CPU interpreter (no CompiledKernel) the host computation runs in forward: host_read."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def touch_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=mask), mask=mask)


def _host_relu(x, out):
    values = [v if v > 0 else 0.0 for v in x.reshape(-1).tolist()]
    out.copy_(torch.tensor(values, dtype=x.dtype, device=x.device).reshape(out.shape))


class _Launch:
    def __init__(self, real):
        self.real = real

    def __call__(self, *args):
        ts = [a for a in args if isinstance(a, torch.Tensor)]
        _host_relu(ts[0], ts[1])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.swapped = []

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        if not x.is_cuda:
            _host_relu(x, out)
        else:
            compiled = touch_kernel.warmup(x, out, n, BLOCK=1024, grid=grid)
            launcher = compiled.run
            if not any(s is launcher for s in self.swapped):
                if type(launcher.launch) is not _Launch:
                    launcher.launch = _Launch(launcher.launch)
                self.swapped.append(launcher)
        touch_kernel[grid](x, out, n, BLOCK=1024)
        return out
