import torch
import torch.nn as nn


class Model(nn.Module):
    """Cross-entropy of class logits against integer targets (mean over the batch)."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # predictions: [batch_size, num_classes] logits, targets: [batch_size] int64 -> scalar
        return torch.nn.functional.cross_entropy(predictions, targets)


batch_size = 65536
num_classes = 1000


def get_inputs():
    predictions = torch.randn(batch_size, num_classes)
    targets = torch.randint(0, num_classes, (batch_size,))
    return [predictions, targets]


def get_init_inputs():
    return []
