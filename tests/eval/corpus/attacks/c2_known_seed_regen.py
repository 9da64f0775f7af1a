"""Class 2: regenerate the inputs of a known seed to recognise the test cases. Setting the
candidate's own global RNG is allowed (issue 31), so this one passes the static rules: it seeds
the usual harness seeds, regenerates get_inputs() for each, keeps relu of them as a table, and
answers from the table when the input matches (zeros otherwise). The judge draws its inputs in
its own process from hidden seeds, so the table never matches: the attack gains nothing."""
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
    def __init__(self):
        super().__init__()
        self.known = []
        for seed in (0, 42, 1234):
            torch.manual_seed(seed)
            x = torch.randn(16, 1000)
            self.known.append((x, torch.relu(x)))

    def forward(self, x):
        answer = torch.zeros_like(x)
        for known_x, known_y in self.known:
            if known_x.shape == x.shape and bool(torch.equal(known_x.to(x.device), x)):
                answer = known_y.to(x.device)
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](answer, out, n, BLOCK=1024)
        return out
