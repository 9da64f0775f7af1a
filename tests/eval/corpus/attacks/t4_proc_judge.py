"""Round 3, OS layer: read the judge's and the fork server's /proc entries (environment,
memory map, memory, open files, working directory), where tokens and the reference's data
live. Prints `TF-LEAK` for each that could be read; the command line and status stay readable
by design (no secret is ever in the judge's argv)."""
import os
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def launch_relu(x, out):
    n = x.numel()
    relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)

SECRET = ("environ", "maps", "mem", "fd", "cwd", "root", "auxv", "smaps")


def read(path):
    if path.endswith(("/fd", "/cwd", "/root")):
        return os.listdir(path)
    with open(path, "rb") as f:
        return f.read(4096)


def snoop():
    for pid in (@@JUDGE_PID@@, os.getppid()):
        for name in SECRET:
            path = f"/proc/{pid}/{name}"
            try:
                data = read(path)
                if data:
                    print(f"TF-LEAK {path} {len(data)}", file=sys.stderr)
            except OSError as exc:
                print("refused:", path, exc.strerror, file=sys.stderr)
        try:
            print("cmdline:", read(f"/proc/{pid}/cmdline")[:200], file=sys.stderr)
        except OSError as exc:
            print("cmdline refused:", exc.strerror, file=sys.stderr)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        snoop()

    def forward(self, x):
        out = torch.empty_like(x)
        launch_relu(x, out)
        return out
