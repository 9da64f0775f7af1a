import torch
import torch.nn as nn


class Model(nn.Module):
    """Depthwise 2D convolution with bias: nn.Conv2d(channels, channels, kernel_size, groups=channels)."""

    def __init__(self, channels: int, kernel_size: int, stride: int = 1, padding: int = 0):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, stride=stride, padding=padding, groups=channels, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


BATCH = 16
CHANNELS = 64
HEIGHT = 256
WIDTH = 256
KERNEL_SIZE = 3
STRIDE = 1
PADDING = 1


def get_inputs():
    x = torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)
    return [x]


def get_init_inputs():
    return [CHANNELS, KERNEL_SIZE, STRIDE, PADDING]
