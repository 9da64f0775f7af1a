"""Round 3, class 7 (GPU, hybrid): the GEMM on a stream of its own that the timing's lead does not
order, and forward returns without waiting for it. The candidate's own process is not timed: the
trusted replay runs the recorded aten::mm on its current stream, so the speedup is that of the
same GEMM, about 1x."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = None

    def forward(self, a, b):
        if self.stream is None:
            self.stream = torch.cuda.Stream()
        with torch.cuda.stream(self.stream):
            out = torch.mm(a, b)
        return out
