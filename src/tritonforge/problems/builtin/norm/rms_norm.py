import torch
import torch.nn as nn


class Model(nn.Module):
    """RMSNorm over the last dimension with a learned scale: x / sqrt(mean(x^2) + eps) * weight."""

    def __init__(self, features: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [batch_size, seq_len, features]
        rms = torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)
        return x / rms * self.weight


batch_size = 16
seq_len = 512
features = 4096
eps = 1e-6


def get_inputs():
    x = torch.randn(batch_size, seq_len, features)
    return [x]


def get_init_inputs():
    return [features, eps]
