import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix-vector multiplication: C (M, 1) = A (M, K) @ B (K, 1)."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 8192
K = 32768


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, 1)
    return [A, B]


def get_init_inputs():
    return []
