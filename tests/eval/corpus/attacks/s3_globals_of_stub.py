"""Issue-14 class 3: the `__globals__` of a function the evaluator installed in torch (read
with a computed name: no audit event covers it) leads to the audit state: switch the audit off,
hide the PyTorch work under the audit's own marker, and copy it out with a kernel."""
import string
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def attr(obj, name):
    """obj.<name> for a name built at runtime (string.Formatter: no getattr in the source)."""
    return string.Formatter().get_field("0." + name, (obj,), {})[0]


def _reach():
    g = attr(torch.Tensor.numpy, "__glo" + "bals__")
    found = [getattr(v, "STATE", None) for v in list(g.values())]
    mods = getattr(g.get("sys"), "modules", {})
    found += [getattr(m, "STATE", None) for n, m in list(mods.items()) if "sandbox" in n]
    return next((s for s in found if s is not None), None)


class ModelNew(nn.Module):
    def forward(self, x):
        state = _reach()
        token = "0" * 16
        if state is not None:
            state.candidate_path = ""
            state.armed = None
            token = state.token
        with torch.autograd.profiler.record_function(f"tf::audit::{token}"):
            y = torch.relu(x)
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](y, out, n, BLOCK=1024)
        return out
