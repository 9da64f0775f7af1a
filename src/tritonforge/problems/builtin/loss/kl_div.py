import torch
import torch.nn as nn


class Model(nn.Module):
    """KL divergence of row distributions, kl_div(log(predictions), targets, 'batchmean')."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # predictions, targets: [batch_size, dim] -> scalar
        return torch.nn.functional.kl_div(torch.log(predictions), targets, reduction="batchmean")


batch_size = 4096
dim = 4096


def get_inputs():
    predictions = torch.randn(batch_size, dim).softmax(dim=-1)
    targets = torch.randn(batch_size, dim).softmax(dim=-1)
    return [predictions, targets]


def get_init_inputs():
    return []
