import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix multiplication with a transposed right operand: C (M, N) = A (M, K) @ B (N, K).T."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B.T)


M = 4096
N = 2048
K = 4096


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(N, K)
    return [A, B]


def get_init_inputs():
    return []
