"""Persisting L2 lines are reset before every L2 flush of the timing loop (timing_loop.py).

Covers: `reset_persisting_l2()`: the CUDA driver's cuCtxResetPersistingL2Cache for the calling
thread's current context (the primary context torch uses), through ctypes on libcuda.so.1; the
library and the function are looked up when this module is imported (in the fork server, before
any candidate code exists; the driver is not initialised then, only loaded). It answers True
when the lines were reset and False where there is nothing to reset: no driver library (every
CPU machine: the call is a no-op there), no current context, or a device without persisting L2.
Why: a candidate can give its stream an access-policy window with hitRatio 1 (cudaStreamSetAttribute
with cudaAccessPolicyWindow, karpathy/llm.c#851) so that its data stays in the persisting part of
L2, which the flush's writes do not evict; reset first, those lines are normal lines again and
the flush evicts them, as gpu-mode/pygpubench's clear_cache does. Does not cover: the flush
itself (timing_loop.py), the set-aside size a candidate may have set (the reset leaves it, but no
line stays persisting across the flush).
"""

from __future__ import annotations

import ctypes
from typing import Any

CUDA_SUCCESS = 0


def _lookup() -> Any:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuCtxResetPersistingL2Cache
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = []
    return fn


_RESET = _lookup()


def available() -> bool:
    """Whether the driver function was found (False on a machine without libcuda)."""
    return _RESET is not None


def reset_persisting_l2() -> bool:
    """Reset every persisting L2 line of the current context to normal; True when done."""
    if _RESET is None:
        return False
    return _RESET() == CUDA_SUCCESS
