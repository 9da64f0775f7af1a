import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear (fp32) in float32, output cast to float16 after ReLU."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)).to(torch.float16)


def get_inputs():
    return [torch.randn(24, 40)]


def get_init_inputs():
    return [40, 56]
