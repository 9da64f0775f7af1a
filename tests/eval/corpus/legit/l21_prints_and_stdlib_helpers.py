"""Legit: prints shapes, warns, logs, and uses namedtuple/dataclass/enum configuration (stdlib
helpers that look at frames internally)."""
import enum
import logging
import warnings
from collections import namedtuple
from dataclasses import dataclass

import torch
import torch.nn as nn
import triton
import triton.language as tl

Launch = namedtuple("Launch", ["block", "warps"])
log = logging.getLogger("candidate")


class Mode(enum.Enum):
    FAST = 1
    SAFE = 2


@dataclass
class Config:
    block: int = 512
    mode: Mode = Mode.SAFE


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask, other=0.0), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = Config()
        self.launch = Launch(self.cfg.block, 4)

    def forward(self, x):
        print(f"relu on {tuple(x.shape)} {x.dtype} with {self.launch}")
        warnings.warn("running the Triton ReLU")
        log.warning("mode %s", self.cfg.mode.name)
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, self.launch.block),)](x, out, n, BLOCK=self.launch.block)
        return out
