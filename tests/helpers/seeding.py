"""Shared pieces of the per-generator seeding tests (judge/rng.py): a reference whose model
initialises with the CPU generator for a few seconds, a thread that builds it, and the
torch.manual_seed values the judge's draws and builds must equal.

Used by tests/unit/test_rng_split.py (CPU) and tests/gpu/test_rng_split_gpu.py (CUDA).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from tritonforge.evaluation.judge import rng
from tritonforge.evaluation.judge.reference import ReferenceStore
from tritonforge.types import Problem

# initialises for at least SLOW_S seconds with the CPU generator (bounded: no waiting on events)
SLOW = """
import time
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, seconds):
        super().__init__()
        self.w = nn.Parameter(torch.empty(1 << 20))
        t0 = time.monotonic()
        while not self.w.is_meta and time.monotonic() - t0 < seconds:  # cannot_run sizes on meta
            self.w.data.uniform_()

    def forward(self, x):
        return x

def get_inputs():
    return [torch.randn(4)]

def get_init_inputs():
    return [SECONDS]
"""
SLOW_S = 3.0


def problem(name: str, src: str) -> Problem:
    return Problem(id=f"t/{name}", suite="t", name=name, reference_src=src)


def manual(fn: Callable[[], Any], seed: int) -> Any:
    """What fn() gives right after torch.manual_seed(seed) (seeds every generator)."""
    torch.manual_seed(seed)
    return fn()


def same(a: Any, b: Any) -> bool:
    """Bit-identical nested values (tensors: dtype, device and every element)."""
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.device == b.device
            and torch.equal(a, b)
        )
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def wait_for_cpu_generator(timeout_s: float = 30.0) -> None:
    """Return once some thread holds the CPU generator's lock (a model build under way)."""
    cpu = rng.generator_lock("cpu")
    deadline = time.monotonic() + timeout_s
    while not cpu.locked():
        assert time.monotonic() < deadline, "no thread took the CPU generator"
        time.sleep(0.005)


class SlowBuild:
    """Builds the SLOW reference for `device` in a thread (its model initialises on the CPU,
    as KernelBench's do); `start` returns once the build holds the CPU generator."""

    def __init__(self, store: ReferenceStore, device: str = "cpu"):
        slow = problem("slow", SLOW.replace("SECONDS", repr(SLOW_S)))
        self.thread = threading.Thread(target=store.reference, args=(slow, device))

    def start(self) -> SlowBuild:
        self.thread.start()
        wait_for_cpu_generator()
        return self

    def building(self) -> bool:
        return self.thread.is_alive()


def draw_concurrently(refs: list[Any], seeds: range, threads: int) -> dict[tuple[int, int], Any]:
    """Each thread draws every (reference, seed), in its own order; (ref index, seed) -> inputs.
    Raises the first error a thread hit."""
    got: dict[tuple[int, int], Any] = {}
    errors: list[BaseException] = []

    def worker(offset: int) -> None:
        try:
            for k in range(len(seeds)):
                s = seeds[(k + offset) % len(seeds)]
                for i, r in enumerate(refs):
                    got[(i, s)] = r.draw_inputs(s, "native")
        except BaseException as exc:  # reported by the calling thread
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(o,)) for o in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=120)
    if errors:
        raise errors[0]
    return got
