import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer, scaled by a constant, plus a residual: linear(x) * scaling_factor + residual."""

    def __init__(self, in_features: int, out_features: int, scaling_factor: float):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.scaling_factor + residual


BATCH = 4096
IN_FEATURES = 2048
OUT_FEATURES = 4096
SCALING_FACTOR = 0.5


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES), torch.randn(BATCH, OUT_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES, SCALING_FACTOR]
