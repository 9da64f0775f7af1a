import torch
import torch.nn as nn


class Model(nn.Module):
    """Batched matrix multiplication: C (B, M, N) = bmm(A (B, M, K), B (B, K, N))."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


BATCH = 32
M = 512
K = 1024
N = 768


def get_inputs():
    A = torch.randn(BATCH, M, K)
    B = torch.randn(BATCH, K, N)
    return [A, B]


def get_init_inputs():
    return []
