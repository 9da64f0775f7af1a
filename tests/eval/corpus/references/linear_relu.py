import torch
import torch.nn as nn


class Model(nn.Module):
    """relu(x @ W^T + b) with an nn.Linear."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return [32, 16]
