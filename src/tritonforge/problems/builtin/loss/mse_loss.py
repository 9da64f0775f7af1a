import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean squared error between predictions and targets (mean reduction, scalar output)."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # predictions, targets: [batch_size, dim] -> scalar
        return torch.mean((predictions - targets) ** 2)


batch_size = 16384
dim = 4096


def get_inputs():
    predictions = torch.randn(batch_size, dim)
    targets = torch.randn(batch_size, dim)
    return [predictions, targets]


def get_init_inputs():
    return []
