"""Attack: a private torch.Generator seeded with the usual harness seed regenerates that
harness's inputs, and the model answers from a table keyed by them (zeros otherwise). A private
generator may be seeded freely; the judge's inputs come from hidden seeds, so this gains nothing."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask, other=0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        gen = torch.Generator()
        gen.manual_seed(42)
        self.scale = torch.randn(features, generator=gen)
        self.known = []
        for seed in (0, 42, 1234):
            g = torch.Generator()
            g.manual_seed(seed)
            x = torch.randn(16, features, generator=g)
            self.known.append((x, x * self.scale))

    def forward(self, x):
        answer = torch.zeros_like(x)
        for known_x, known_y in self.known:
            if known_x.shape == x.shape and bool(torch.equal(known_x.to(x.device), x)):
                answer = known_y.to(x.device)
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 256),)](answer, out, n, BLOCK=256)
        return out
