import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the trailing feature dimension(s), with learned weight and bias."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [batch_size, seq_len, features]
        return self.ln(x)


batch_size = 64
seq_len = 512
features = 4096


def get_inputs():
    x = torch.randn(batch_size, seq_len, features)
    return [x]


def get_init_inputs():
    return [(features,)]
