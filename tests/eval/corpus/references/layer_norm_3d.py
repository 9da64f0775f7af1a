import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the last three dimensions (KernelBench L1/40 in miniature)."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 4
features = 8
dim1 = 16
dim2 = 12


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [(features, dim1, dim2)]
