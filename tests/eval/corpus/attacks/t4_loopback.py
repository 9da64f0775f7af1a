"""Round 3, OS layer: reach the network from the worker. A TCP connection to the judge's
loopback listener through the socket module and through raw libc socket/connect calls (ctypes),
and a connection to an abstract unix socket (abstract names have no file permission and are
shared by everything in one network namespace, as in the rlimits sandbox)."""
import ctypes
import socket
import struct
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


def raw_connect(port):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
    if fd < 0:
        return f"socket: errno {ctypes.get_errno()}"
    addr = struct.pack("!HH4s8x", socket.AF_INET, port, socket.inet_aton("127.0.0.1"))
    addr = struct.pack("=H", socket.AF_INET) + addr[2:]
    rc = libc.connect(fd, addr, len(addr))
    return "connected" if rc == 0 else f"connect: errno {ctypes.get_errno()}"


def reach_out():
    try:
        socket.create_connection(("127.0.0.1", @@PORT@@), timeout=2).close()
        print("TF-LEAK tcp connected", file=sys.stderr)
    except OSError as exc:
        print("tcp refused:", exc, file=sys.stderr)
    print("raw:", raw_connect(@@PORT@@), file=sys.stderr)
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("\0@@ABSTRACT@@")
        print("TF-LEAK abstract socket connected", file=sys.stderr)
    except OSError as exc:
        print("abstract refused:", exc, file=sys.stderr)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        reach_out()

    def forward(self, x):
        out = torch.empty_like(x)
        launch_relu(x, out)
        return out
