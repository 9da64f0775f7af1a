import torch
import torch.nn as nn


class Model(nn.Module):
    """Row means of a down-scaled input: near zero (|y| < 1e-4) for zero-mean inputs."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 1e-3).mean(dim=1)


def get_inputs():
    return [torch.randn(16, 4000)]


def get_init_inputs():
    return []
