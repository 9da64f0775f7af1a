import torch
import torch.nn as nn


class Model(nn.Module):
    """Smooth L1 (Huber, beta=1) loss with mean reduction."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # predictions, targets: [batch_size, dim] -> scalar
        return torch.nn.functional.smooth_l1_loss(predictions, targets)


batch_size = 16384
dim = 4096


def get_inputs():
    predictions = torch.randn(batch_size, dim)
    targets = torch.randn(batch_size, dim)
    return [predictions, targets]


def get_init_inputs():
    return []
