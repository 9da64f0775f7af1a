import torch
import torch.nn as nn


class Model(nn.Module):
    """Adds a bias row to every row of a matrix (broadcast over the batch dimension)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        # x: [batch_size, dim], bias: [dim] -> [batch_size, dim]
        return x + bias


batch_size = 16384
dim = 8192


def get_inputs():
    x = torch.randn(batch_size, dim)
    bias = torch.randn(dim)
    return [x, bias]


def get_init_inputs():
    return []
