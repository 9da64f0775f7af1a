import torch
import torch.nn as nn


class Model(nn.Module):
    """Rectangular matrix multiplication: C (M, N) = A (M, K) @ B (K, N)."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 4096
K = 2048
N = 3072


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
