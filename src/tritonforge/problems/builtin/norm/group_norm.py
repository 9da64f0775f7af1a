import torch
import torch.nn as nn


class Model(nn.Module):
    """GroupNorm over channels split into groups, with learned per-channel weight and bias."""

    def __init__(self, num_groups: int, num_channels: int):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [batch_size, channels, height, width]
        return self.gn(x)


batch_size = 128
channels = 128
num_groups = 32
height = 64
width = 64


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [num_groups, channels]
