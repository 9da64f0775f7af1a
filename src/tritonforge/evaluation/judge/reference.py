"""Trusted side of a problem: the reference module, hidden-seed inputs, and cached reference outputs.

Covers: executing a problem's reference source in the judge process (it is problem-provided and
trusted), building `Model` with an init seed, drawing inputs for a hidden seed and an input
distribution, computing and caching reference outputs per (problem, seed, distribution, device)
with a byte budget, and packing inputs once into a sealed memfd that every worker maps
read-only. Does not cover: candidate code (never imported here) or comparison (compare.py).
"""

from __future__ import annotations

import hashlib
import os
import threading
import types
from collections import OrderedDict
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from tritonforge.evaluation.judge.compare import output_bytes
from tritonforge.evaluation.judge.gpu_lock import judge_device
from tritonforge.evaluation.sandbox.protocol import (
    map_tensors,
    pack,
    pack_into,
    unpack_buffer,
)
from tritonforge.types import Problem

INIT_SEED = 42
_RNG_LOCK = threading.Lock()  # get_inputs/Model() use torch's global RNG: one seeded draw at a time
DISTRIBUTIONS = ("native", "shifted", "scaled", "positive")


class ReferenceError(Exception):
    """The reference itself is broken (does not load or run): not the candidate's fault."""


def load_module(src: str, name: str) -> types.ModuleType:
    """Execute a reference source as a fresh module (trusted code)."""
    mod = types.ModuleType(f"tf_reference_{hashlib.sha1(name.encode()).hexdigest()[:10]}")
    mod.__file__ = f"<reference {name}>"
    try:
        exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    except Exception as exc:
        raise ReferenceError(
            f"reference {name} failed to load: {type(exc).__name__}: {exc}"
        ) from exc
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, attr):
            raise ReferenceError(f"reference {name} defines no {attr}")
    return mod


def transform(x: torch.Tensor, dist: str, gen: torch.Generator) -> torch.Tensor:
    """Apply an input distribution to one floating tensor (integer/bool tensors pass unchanged).

    native: unchanged. shifted: non-zero mean (x + c, or x*a + c for non-negative inputs).
    scaled: x * 4. positive: |x| + 0.05. Sign constraints of non-negative inputs are kept.
    """
    if dist == "native" or not x.is_floating_point() or x.numel() == 0:
        return x
    nonneg = bool((x >= 0).all())
    u = float(torch.rand((), generator=gen))
    if dist == "shifted":
        return x * (1.0 + u) + (0.25 + u) if nonneg else x + (0.75 + u)
    if dist == "scaled":
        return x * 4.0
    if dist == "positive":
        return x.abs() + 0.05
    raise ValueError(f"unknown distribution {dist!r}; known: {DISTRIBUTIONS}")


@dataclass
class Case:
    """One set of inputs, its reference outputs and the packed memfd shared with workers."""

    inputs: list[Any]
    expected: Any
    desc: dict[str, Any]
    fd: int
    nbytes: int
    device_bytes: int = 0  # of nbytes, those in device memory (expected outputs, packed inputs)
    packed: torch.Tensor | None = None  # on a GPU: the memfd's bytes in device memory too

    def close(self) -> None:
        """Close the memfd once; idempotent."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        # Evicted cases are closed when the last evaluation holding them lets go (closing on
        # eviction races with threads about to dup the fd: EBADF).
        self.close()


@dataclass
class Reference:
    """A loaded problem on one device: the module, the model and a cache of cases."""

    problem: Problem
    device: str
    module: types.ModuleType
    model: torch.nn.Module
    init_inputs: list[Any]
    lock: threading.Lock = field(default_factory=threading.Lock)

    def draw_inputs(self, seed: int, dist: str) -> list[Any]:
        """get_inputs() under a hidden seed. On a GPU the draw runs there (factory calls default
        to the device): CPU randn of the 0.5-GiB gpu presets took seconds per case, under the
        global RNG lock that serialises every evaluation thread."""
        gen = torch.Generator().manual_seed(seed ^ 0x5EED)
        where = torch.device(self.device) if self.device.startswith("cuda") else nullcontext()
        with _RNG_LOCK, where:
            torch.manual_seed(seed)
            raw = list(self.module.get_inputs())
        return [map_tensors(v, lambda t: transform(t, dist, gen)) for v in raw]

    def run(self, inputs: list[Any]) -> Any:
        # a copy even on the same device: a reference that works in place must not change the
        # inputs the candidate will get
        dev_inputs = [map_tensors(v, lambda t: t.to(self.device, copy=True)) for v in inputs]
        with torch.no_grad():
            out = self.model(*dev_inputs)
        return map_tensors(out, lambda t: t.detach())


def exact_fp32() -> None:
    """References compute fp32 in fp32: no TF32 in cuBLAS or cuDNN (cuDNN's default is TF32,
    which is less exact than a correct fp32 Triton kernel and would fail it at 1e-4)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


class ReferenceStore:
    """Thread-safe cache of loaded references and their cases, bounded by bytes (LRU)."""

    def __init__(self, max_bytes: int = 4 << 30):
        exact_fp32()
        self.max_bytes = max_bytes
        self._refs: dict[tuple[str, str, str], Reference] = {}
        self._cases: OrderedDict[tuple, Case] = OrderedDict()
        self._bytes = 0
        self._device_bytes: dict[str, int] = {}
        self._device_limits: dict[str, int] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _src_key(problem: Problem) -> str:
        return hashlib.sha256(problem.reference_src.encode()).hexdigest()[:16]

    def reference(self, problem: Problem, device: str) -> Reference:
        key = (problem.id, self._src_key(problem), device)
        with self._lock:
            ref = self._refs.get(key)
        if ref is not None:
            return ref
        module = load_module(problem.reference_src, problem.id)
        try:
            with _RNG_LOCK:
                torch.manual_seed(INIT_SEED)
                init_inputs = list(module.get_init_inputs())
                torch.manual_seed(INIT_SEED)
                model = module.Model(*init_inputs)
            if isinstance(model, torch.nn.Module):
                model = model.to(device)
        except Exception as exc:
            raise ReferenceError(
                f"reference {problem.id} failed to build: {type(exc).__name__}: {exc}"
            ) from exc
        ref = Reference(problem, device, module, model, init_inputs)
        with self._lock:
            return self._refs.setdefault(key, ref)

    def case(self, ref: Reference, seed: int, dist: str) -> Case:
        key = (ref.problem.id, self._src_key(ref.problem), ref.device, seed, dist)
        with self._lock:
            case = self._cases.get(key)
            if case is not None:
                self._cases.move_to_end(key)
                return case
        # one thread computes a given problem's cases at a time; no other judge GPU work meanwhile
        with ref.lock, judge_device(ref.device):
            try:
                inputs = ref.draw_inputs(seed, dist)
                expected = ref.run(inputs)
            except Exception as exc:
                raise ReferenceError(
                    f"reference {ref.problem.id} failed on its own inputs: {type(exc).__name__}: {exc}"
                ) from exc
            desc, fd = pack(inputs)
            out_bytes = output_bytes(expected)
            packed = None
            if ref.device != "cpu":  # what a shared device buffer is filled from (transport.py)
                packed = torch.empty(desc["size"], dtype=torch.uint8, device=ref.device)
                pack_into(inputs, packed)
                inputs = list(unpack_buffer(desc, packed, keep_strides=True, copy=False))
            dev_bytes = 0 if packed is None else out_bytes + desc["size"]
            nbytes = desc["size"] + out_bytes + (0 if packed is None else desc["size"])
            case = Case(inputs, expected, desc, fd, nbytes, dev_bytes, packed)
        with self._lock:
            if key in self._cases:
                case.close()
                return self._cases[key]
            self._cases[key] = case
            self._bytes += case.nbytes
            self._device_bytes[ref.device] = (
                self._device_bytes.get(ref.device, 0) + case.device_bytes
            )
            while len(self._cases) > 1 and (
                self._bytes > self.max_bytes
                or self._device_bytes[ref.device] > self._device_bound(ref.device)
            ):
                old_key, old = self._cases.popitem(last=False)
                self._bytes -= old.nbytes  # closed by Case.__del__ once no thread holds it
                self._device_bytes[old_key[2]] -= old.device_bytes
        return case

    def _device_bound(self, device: str) -> float:
        """Expected outputs kept on a GPU: at most a quarter of its memory (candidates need it)."""
        if device == "cpu":
            return float("inf")
        if device not in self._device_limits:
            total = torch.cuda.get_device_properties(torch.device(device)).total_memory
            self._device_limits[device] = total // 4
        return self._device_limits[device]

    def clear(self) -> None:
        with self._lock:
            self._cases.clear()  # memfds close as the cases are collected
            self._refs.clear()
            self._bytes = 0
            self._device_bytes.clear()
