import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """RMSNorm over the last dimension with a learned scale, followed by SiLU."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super(Model, self).__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return F.silu(x * rms * self.weight)


BATCH = 8192
HIDDEN_SIZE = 4096
EPS = 1e-6


def get_inputs():
    return [torch.randn(BATCH, HIDDEN_SIZE)]


def get_init_inputs():
    return [HIDDEN_SIZE, EPS]
