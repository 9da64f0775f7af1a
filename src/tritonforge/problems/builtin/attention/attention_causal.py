import math

import torch
import torch.nn as nn


class Model(nn.Module):
    """Causal scaled dot-product attention: key j is visible to query i only when j <= i."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        seq_len = q.size(-2)
        scale = 1.0 / math.sqrt(q.size(-1))
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # [B, H, S, S]
        future = torch.ones(seq_len, seq_len, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)


BATCH = 4
HEADS = 8
SEQ_LEN = 1024
HEAD_DIM = 64


def get_inputs():
    q = torch.randn(BATCH, HEADS, SEQ_LEN, HEAD_DIM)
    k = torch.randn(BATCH, HEADS, SEQ_LEN, HEAD_DIM)
    v = torch.randn(BATCH, HEADS, SEQ_LEN, HEAD_DIM)
    return [q, k, v]


def get_init_inputs():
    return []
