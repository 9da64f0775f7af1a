import torch
import torch.nn as nn


class Model(nn.Module):
    """Two linear layers with a ReLU between them (submodules, parameters)."""

    def __init__(self, d_in: int, d_hidden: int, d_out: int):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def get_inputs():
    return [torch.randn(20, 32)]


def get_init_inputs():
    return [32, 48, 16]
