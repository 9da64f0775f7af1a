import math

import torch
import torch.nn as nn


class Model(nn.Module):
    """Scaled dot-product attention, non-causal: softmax(Q @ K^T / sqrt(D)) @ V on [B, H, S, D]."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scale = 1.0 / math.sqrt(q.size(-1))
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # [B, H, S, S]
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
