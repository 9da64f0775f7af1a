"""Issue-14 class 1: the raw `_thread.start_new_thread` (reached as an attribute of
threading, found by a computed name) computes on another thread; forward waits on a lock."""
import queue
import string
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def attr(obj, name):
    """obj.<name> for a name built at runtime (string.Formatter: no getattr in the source)."""
    return string.Formatter().get_field("0." + name, (obj,), {})[0]


class ModelNew(nn.Module):
    def forward(self, x):
        threading = attr(queue, "threa" + "ding")
        raw = attr(threading, "_start_new" + "_thread")
        lock = threading.Lock()
        lock.acquire()
        box = {}

        def work():
            box["y"] = torch.relu(x)
            lock.release()

        raw(work, ())
        lock.acquire()
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](box["y"], out, n, BLOCK=1024)
        return out
