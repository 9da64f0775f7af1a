import torch
import torch.nn as nn


class Model(nn.Module):
    """Half-precision matrix multiplication: C (M, N) = A (M, K) @ B (K, N), all float16."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 4096
K = 2048
N = 4096


def get_inputs():
    A = torch.randn(M, K, dtype=torch.float16)
    B = torch.randn(K, N, dtype=torch.float16)
    return [A, B]


def get_init_inputs():
    return []
