"""Round 3, OS layer: memfd pages beyond the memory limit held by another process of the tree.
The worker forks a child that creates memfds of 512 MB, fills them with pwrite (never mapped) and sleeps
holding only the descriptor; the worker itself stays small and computes a correct ReLU."""
import os
import time

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

CHUNK, FILE = 64 << 20, 512 << 20


def hoard_in_child(total):
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            fds, buf = [], b"\x5a" * CHUNK
            for i in range(total // CHUNK):
                if i % (FILE // CHUNK) == 0:
                    fds.append(os.memfd_create("hoard"))
                os.pwrite(fds[-1], buf, (i % (FILE // CHUNK)) * CHUNK)
            os.write(done_w, b"x")
            time.sleep(60)
        finally:
            os._exit(0)
    os.close(done_w)
    os.read(done_r, 1)  # the child holds it all now (or was killed trying)
    return pid


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.child = hoard_in_child(2 * (4096 << 20))
        time.sleep(2)  # held while the worker is judged

    def forward(self, x):
        out = torch.empty_like(x)
        launch_relu(x, out)
        return out
