import torch
import torch.nn as nn


class Model(nn.Module):
    """x times a learned per-feature scale drawn at initialisation (the global RNG, seeded by the
    judge before the model is built)."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64]
