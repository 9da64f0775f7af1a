import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer (GEMM + bias) followed by ReLU."""

    def __init__(self, in_features: int, out_features: int):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


BATCH = 4096
IN_FEATURES = 4096
OUT_FEATURES = 4096


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
