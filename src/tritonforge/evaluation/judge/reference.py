"""Trusted side of a problem: the reference module, hidden-seed inputs, and cached reference outputs.

Covers: executing a problem's reference source in the judge process (it is problem-provided and
trusted), building `Model` with an init seed, drawing inputs for a hidden seed and an input
distribution, computing and caching reference outputs per (problem, seed, distribution, device)
with a byte budget, and packing inputs once into a sealed memfd that every worker maps
read-only (on a GPU the inputs are packed into device memory, which is what shared device
buffers are filled from, and the memfd is made on first use only). Also each problem's device
`Footprint` (inputs, outputs, the reference's workspace: peak allocated while it ran, measured
when its first case is built; weights), a size estimate before that (`meta_footprint`), the
device bytes the cache holds per device (cases and reference models) and freeing them, least
recently used first, for memory admission; `why_not`, the one reason a problem cannot be judged
on a device here, without a ReferenceStore (`tritonforge problems check`). The judge's own
out-of-memory errors are raised as `JudgeOutOfMemory`, never as a broken reference.
The determinism check: the first case is run twice; a reference whose outputs differ is
marked nondeterministic and its cases carry the statistics of several runs (problem_check.py).
Seeding (rng.py): every use of torch's global generators here (get_init_inputs, building
`Model` with `INIT_SEED`, `cannot_run`, `meta_footprint`, and each case's input draw with its
hidden seed) holds and seeds exactly the generators it draws from, one lock per generator. A
model initialising on the CPU holds the CPU generator only, so an input draw on a GPU (its
factory calls draw from that GPU's generator) does not wait for it; a get_inputs that also
draws on the CPU (an explicit `device="cpu"`, `randperm`) holds both. The generators a
problem's draw used are kept per Reference as where the next draw starts. Values are those of
`torch.manual_seed(seed)` followed by the same call, as the candidate's worker builds
`ModelNew` (sandbox/worker.py).
Does not cover: candidate code (never imported here), comparison (compare.py), admission
(admission.py).
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import mmap
import os
import secrets
import threading
import types
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from tritonforge.evaluation.judge.admission import Footprint, JudgeOutOfMemory
from tritonforge.evaluation.judge.compare import output_bytes
from tritonforge.evaluation.judge.distributions import transform
from tritonforge.evaluation.judge.gpu_lock import judge_device
from tritonforge.evaluation.judge.noise import noise_of, perturbed, rounding_error
from tritonforge.evaluation.judge.problem_check import cannot_run, missing_reason, randomness
from tritonforge.evaluation.judge.rng import generator_key, must_hold, seeded
from tritonforge.evaluation.sandbox.classify import is_device_oom
from tritonforge.evaluation.sandbox.numerics import exact_fp32
from tritonforge.evaluation.sandbox.protocol import (
    flatten_tensors,
    map_tensors,
    pack,
    pack_into,
    packed_size,
    unpack_buffer,
)
from tritonforge.types import Problem

INIT_SEED = 42  # the global generators' seed for Model(): the candidate's worker uses it too


class ReferenceError(Exception):
    """The reference itself is broken (does not load or run), or the problem cannot run here
    (`unrunnable`: a missing library, no offline config, not enough memory): not the
    candidate's fault."""

    def __init__(self, message: str, unrunnable: bool = False):
        super().__init__(message)
        self.unrunnable = unrunnable


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


def why_not(problem: Problem, device: str = "cpu") -> str | None:
    """The one reason `problem` cannot be judged on `device` here (as its verdict would say),
    or None; nothing is allocated (the reference is sized on the meta device)."""
    reason = (problem.meta or {}).get("cannot_run") or missing_reason(problem)
    if reason:
        return str(reason)
    try:
        module = load_module(problem.reference_src, problem.id)
        start = must_hold(problem.reference_src, device)
        init_inputs, _ = seeded(lambda: list(module.get_init_inputs()), INIT_SEED, start)
        return seeded(lambda: cannot_run(problem, device, module, init_inputs), INIT_SEED, start)[0]
    except Exception as exc:
        return f"broken reference: {type(exc).__name__}: {exc}"[:500]


class Case:
    """One set of inputs, its reference outputs, and the sealed memfd workers can map.

    On a GPU `packed` holds the inputs' bytes in device memory (what shared device buffers are
    filled from) and the memfd is made from it on first use (`fd`): with device sharing it is
    needed only by the timing process and by fallbacks, and making it costs a device-to-host
    copy of every input (seconds for the largest KernelBench problems)."""

    def __init__(
        self,
        inputs: list[Any],
        expected: Any,
        desc: dict[str, Any],
        fd: int,
        nbytes: int,
        device_bytes: int = 0,  # of nbytes, those in device memory (expected, packed inputs)
        packed: torch.Tensor | None = None,
        stat_runs: list[list[tuple[float, float, float, int]]] | None = None,
        noise: list[float | None] | None = None,
        rounding: list[float | None] | None = None,
    ):
        self.inputs, self.expected, self.desc = inputs, expected, desc
        # per top-level output: how far it moves when the inputs move by a few ulps (noise.py)
        self.noise = noise
        # per top-level output: its distance from the reference run in float64 (noise.py)
        self.rounding = rounding
        self.ident = secrets.token_hex(8)  # names this case to the timing process
        # nondeterministic reference: the statistics of several runs (problem_check.randomness)
        self.stat_runs = stat_runs
        self.nbytes, self.device_bytes, self.packed = nbytes, device_bytes, packed
        self._fd = fd
        self._closed = False
        self._lock = threading.Lock()
        self.on_memfd: Callable[[int], None] | None = None  # told the host bytes once made

    @property
    def fd(self) -> int:
        """The sealed memfd of the inputs (made now if it was not yet); -1 once closed."""
        if self._fd < 0 and not self._closed and self.packed is not None:
            # the device's gate before this case's lock (device_gate.py's lock order)
            with judge_device(str(self.packed.device)), self._lock:
                if self._fd < 0 and not self._closed:
                    self._fd = sealed_memfd(self.packed)
                    if self.on_memfd is not None:
                        self.on_memfd(self.packed.numel())
        return self._fd

    def close(self) -> None:
        """Close the memfd once; idempotent."""
        self._closed = True
        fd, self._fd = self._fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        # Evicted cases are closed when the last evaluation holding them lets go (closing on
        # eviction races with threads about to dup the fd: EBADF).
        self.close()


def sealed_memfd(buf: torch.Tensor) -> int:
    """A read-only sealed memfd holding the bytes of the flat uint8 tensor `buf`."""
    size = buf.numel()
    fd = os.memfd_create("tf-values", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, max(size, 1))
        if size:
            with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as mm:
                view = torch.frombuffer(mm, dtype=torch.uint8, count=size)
                view.copy_(buf)
                del view
        seals = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _widened(t: torch.Tensor) -> torch.Tensor:
    """`t` in float64 when it is a real floating tensor, else `t`."""
    return t.double() if t.is_floating_point() else t


@dataclass
class Reference:
    """A loaded problem on one device: the module, the model and a cache of cases."""

    problem: Problem
    device: str
    module: types.ModuleType
    model: torch.nn.Module
    init_inputs: list[Any]
    lock: threading.Lock = field(default_factory=threading.Lock)
    checked: bool = False  # the determinism check ran (on the first case built)
    nondeterministic: str | None = None  # why: two runs on the same inputs differ
    weights: int = 0  # device bytes of the model's parameters and buffers
    footprint: Footprint | None = None  # measured when the first case is built
    draws_from: frozenset[str] | None = None  # the global generators the last draw used
    spread: float | None = None  # input bytes over output bytes (heavy inputs), once measured
    degeneracy: Any = None  # degenerate.Degeneracy, measured once (degenerate.degeneracy)

    def draw_inputs(self, seed: int, dist: str) -> list[Any]:
        """get_inputs() under a hidden seed. On a GPU the draw runs there (factory calls default
        to the device): CPU randn of the 0.5-GiB gpu presets took seconds per case. Holds only
        the generators it draws from (rng.py): a CPU model build elsewhere does not stall it."""
        gen = torch.Generator().manual_seed(seed ^ 0x5EED)
        cuda = self.device.startswith("cuda")

        def draw() -> list[Any]:
            if not cuda:
                return list(self.module.get_inputs())
            with torch.device(self.device):
                return list(self.module.get_inputs())

        start = must_hold(self.problem.reference_src, self.device)
        if not start:
            own = frozenset(filter(None, [generator_key(self.device)]))
            start = own if self.draws_from is None else self.draws_from
        raw, self.draws_from = seeded(draw, seed, start)
        if dist == "heavy" and self.spread is None:
            self.spread = self._spread(raw)
        spread = self.spread or 1.0
        return [map_tensors(v, lambda t: transform(t, dist, gen, spread)) for v in raw]

    def _spread(self, raw: list[Any]) -> float:
        """Input bytes over output bytes: from shapes on the meta device, else from a run of
        the reference on the problem's own inputs `raw`."""
        fp = meta_footprint(self)
        if fp.inputs and fp.outputs:
            return fp.inputs / fp.outputs
        in_bytes = sum(t.numel() * t.element_size() for t in flatten_tensors(raw))
        return in_bytes / max(1, output_bytes(self.run(raw)))

    def run(self, inputs: list[Any], perturb: Callable[[torch.Tensor], Any] | None = None) -> Any:
        """The reference's outputs on copies of `inputs` (`perturb` changes each copy first:
        noise.Perturber)."""
        # a copy even on the same device: a reference that works in place must not change the
        # inputs the candidate will get
        dev_inputs = [map_tensors(v, lambda t: t.to(self.device, copy=True)) for v in inputs]
        if perturb is not None:
            dev_inputs = [map_tensors(v, perturb) for v in dev_inputs]
        with torch.no_grad():
            out = self.model(*dev_inputs)
        return map_tensors(out, lambda t: t.detach())

    def wide_runner(self) -> Callable[..., Any]:
        """A runner of the reference recomputed in float64: `run(inputs, perturb=None)` copies
        the floating inputs, changes them by `perturb` in their own dtype, widens them and runs
        one float64 copy of the model (made here once, dropped with the runner). It answers
        None when the model cannot run so (a dtype fixed inside its forward, an op without
        float64, no memory left): the yardstick of its own rounding (noise.rounding_error)."""
        try:
            model: Any = copy.deepcopy(self.model).double()
        except Exception:  # any failure only means no float64 yardstick
            model = None

        def run(inputs: list[Any], perturb: Callable[[torch.Tensor], Any] | None = None) -> Any:
            if model is None:
                return None
            try:
                dev = [map_tensors(v, lambda t: t.to(self.device, copy=True)) for v in inputs]
                if perturb is not None:
                    dev = [map_tensors(v, perturb) for v in dev]
                dev = [map_tensors(v, _widened) for v in dev]
                with torch.no_grad():
                    out = model(*dev)
                return map_tensors(out, lambda t: t.detach())
            except Exception:  # as above
                return None

        return run


# cases kept at most, whatever their bytes: each holds a memfd (a judge of many small problems
# kept over a thousand open, past what select() and a default RLIMIT_NOFILE allow)
MAX_CASES = 256


class ReferenceStore:
    """Thread-safe cache of loaded references and their cases, bounded by bytes (LRU).

    `device_room(device)`, when set (by the Evaluator's memory admission), bounds the bytes of
    cases kept on that device besides a quarter of its memory."""

    def __init__(self, max_bytes: int = 4 << 30):
        exact_fp32()
        self.max_bytes = max_bytes
        self._refs: OrderedDict[tuple[str, str, str], Reference] = OrderedDict()  # LRU first
        self._footprints: dict[tuple[str, str, str], Footprint] = {}  # outlive evicted models
        self._cases: OrderedDict[tuple, Case] = OrderedDict()
        self._bytes = 0
        self._device_bytes: dict[str, int] = {}
        self._device_limits: dict[str, int] = {}
        self._unrunnable: dict[tuple[str, str, str], str] = {}  # why a problem cannot run here
        self._lock = threading.Lock()
        self.device_room: Callable[[str], float] | None = None

    @staticmethod
    def _src_key(problem: Problem) -> str:
        return hashlib.sha256(problem.reference_src.encode()).hexdigest()[:16]

    def reference(self, problem: Problem, device: str) -> Reference:
        key = (problem.id, self._src_key(problem), device)
        with self._lock:
            ref = self._refs.get(key)
            unrunnable = self._unrunnable.get(key)
            if ref is not None:
                self._refs.move_to_end(key)
        if ref is not None:
            return ref
        if unrunnable is None:
            unrunnable = (problem.meta or {}).get("cannot_run") or missing_reason(problem)
        if not unrunnable:
            module = load_module(problem.reference_src, problem.id)
            try:
                # each step holds (and seeds with INIT_SEED) only the generators it draws from
                start = must_hold(problem.reference_src, device)
                init_inputs, _ = seeded(lambda: list(module.get_init_inputs()), INIT_SEED, start)
                unrunnable, _ = seeded(
                    lambda: cannot_run(problem, device, module, init_inputs), INIT_SEED, start
                )
                model = None
                if not unrunnable:
                    model, _ = seeded(lambda: module.Model(*init_inputs), INIT_SEED, start)
                if isinstance(model, torch.nn.Module):
                    with judge_device(device):
                        model = model.to(device)
            except Exception as exc:
                if is_device_oom(exc):
                    raise JudgeOutOfMemory(f"loading the reference {problem.id}", exc) from exc
                raise ReferenceError(
                    f"reference {problem.id} failed to build: {type(exc).__name__}: {exc}"
                ) from exc
        if unrunnable:
            with self._lock:
                self._unrunnable[key] = unrunnable
            raise ReferenceError(str(unrunnable), unrunnable=True)
        ref = Reference(problem, device, module, model, init_inputs, weights=model_bytes(model))
        with self._lock:
            ref.footprint = self._footprints.get(key)
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
                case = self._build(ref, seed, dist)
            except Exception as exc:
                if is_device_oom(exc):
                    where = f"building a case of {ref.problem.id}"
                    raise JudgeOutOfMemory(where, exc) from exc
                raise ReferenceError(
                    f"reference {ref.problem.id} failed on its own inputs: {type(exc).__name__}: {exc}"
                ) from exc
        case.on_memfd = self._grow
        bound = self._device_bound(ref.device)  # outside the lock: device_room reads this store
        with self._lock:
            if key in self._cases:
                case.close()
                return self._cases[key]
            self._cases[key] = case
            self._bytes += case.nbytes
            self._device_bytes[ref.device] = (
                self._device_bytes.get(ref.device, 0) + case.device_bytes
            )
            self._evict(ref.device, bound)
        return case

    def _build(self, ref: Reference, seed: int, dist: str) -> Case:
        """Draw, run the reference (measuring its footprint the first time) and pack."""
        inputs = ref.draw_inputs(seed, dist)
        cuda = ref.device.startswith("cuda")
        if cuda and ref.footprint is None:
            torch.cuda.reset_peak_memory_stats(ref.device)
            base = torch.cuda.memory_allocated(ref.device)
        expected = ref.run(inputs)
        # the reference's own peak, read before the determinism check runs it again and compares
        peak = (
            torch.cuda.max_memory_allocated(ref.device) - base
            if cuda and ref.footprint is None
            else 0
        )
        stat_runs = randomness(ref, inputs, expected)  # checked on the first case
        noise = rounding = None
        if not stat_runs:
            again = perturbed(ref.run, inputs, expected, seed)  # one run serves both
            noise = noise_of(expected, again)
            rounding = rounding_error(ref.wide_runner(), inputs, expected, again, seed)
        in_bytes = sum(t.numel() * t.element_size() for t in flatten_tensors(inputs))
        out_bytes = output_bytes(expected)
        if ref.footprint is None:
            # beyond its own copy of the inputs and the outputs it returned
            work = max(0, peak - in_bytes - out_bytes) if cuda else 0
            ref.footprint = Footprint(in_bytes, out_bytes, work, ref.weights, measured=cuda)
            with self._lock:
                self._footprints[(ref.problem.id, self._src_key(ref.problem), ref.device)] = (
                    ref.footprint
                )
        if ref.device == "cpu":
            desc, fd = pack(inputs)
            size = desc["size"] + out_bytes
            return Case(
                inputs, expected, desc, fd, size, stat_runs=stat_runs, noise=noise,
                rounding=rounding,
            )  # fmt: skip
        # what a shared device buffer is filled from (transport.py); the memfd is made on use
        packed = torch.empty(packed_size(inputs), dtype=torch.uint8, device=ref.device)
        desc = pack_into(inputs, packed)
        assert desc is not None  # sized by packed_size
        inputs = list(unpack_buffer(desc, packed, keep_strides=True, copy=False))
        dev_bytes = out_bytes + desc["size"]
        return Case(
            inputs, expected, desc, -1, dev_bytes, dev_bytes, packed, stat_runs, noise, rounding
        )

    def _grow(self, host_bytes: int) -> None:
        """A case made its memfd: count the host bytes (evicted beyond the bound later)."""
        with self._lock:
            self._bytes += host_bytes

    def _evict(self, device: str, device_bound: float) -> None:
        """Drop least recently used cases while over a bound (caller holds the lock)."""
        while len(self._cases) > 1 and (
            self._bytes > self.max_bytes
            or self._device_bytes[device] > device_bound
            or len(self._cases) > MAX_CASES
        ):
            self._drop_oldest()

    def _drop_oldest(self, device: str | None = None) -> bool:
        """Forget the least recently used case (of `device`, if given); closed by Case.__del__
        once no thread holds it. Caller holds the lock."""
        key = next((k for k in self._cases if device is None or k[2] == device), None)
        if key is None:
            return False
        old = self._cases.pop(key)
        self._bytes -= old.nbytes
        self._device_bytes[key[2]] -= old.device_bytes
        return True

    def _device_bound(self, device: str) -> float:
        """Cases kept on a GPU: at most a quarter of its memory (candidates need it), and no
        more than memory admission has room for. Call without holding the lock."""
        if device == "cpu":
            return float("inf")
        if device not in self._device_limits:
            total = torch.cuda.get_device_properties(torch.device(device)).total_memory
            self._device_limits[device] = total // 4
        room = self.device_room(device) if self.device_room is not None else float("inf")
        return min(self._device_limits[device], room)

    # -- memory admission ---------------------------------------------------------------------
    def model_bytes(self, device: str) -> int:
        """Device bytes of the reference models loaded on `device` (kept while the judge runs)."""
        with self._lock:
            return sum(r.weights for k, r in self._refs.items() if k[2] == device)

    def case_bytes(self, device: str) -> int:
        with self._lock:
            return self._device_bytes.get(device, 0)

    def free_device(self, device: str, nbytes: int) -> None:
        """Forget at least `nbytes` of `device` memory if possible: cached cases first, then
        reference models, least recently used first (an evaluation still holding one keeps it
        alive until it is done; a forgotten model is built again on its next use, its measured
        footprint kept)."""
        with self._lock:
            freed = 0
            while freed < nbytes:
                before = self._device_bytes.get(device, 0)
                if not self._drop_oldest(device):
                    break
                freed += before - self._device_bytes.get(device, 0)
            for key in [k for k in self._refs if k[2] == device]:
                if freed >= nbytes:
                    break
                freed += self._refs.pop(key).weights

    def clear(self) -> None:
        with self._lock:
            self._cases.clear()  # memfds close as the cases are collected
            self._refs.clear()
            self._footprints.clear()
            self._bytes = 0
            self._device_bytes.clear()


def model_bytes(model: Any) -> int:
    """Bytes of a module's parameters and buffers (0 for a plain callable)."""
    if not isinstance(model, torch.nn.Module):
        return 0
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def meta_footprint(ref: Reference) -> Footprint:
    """Sizes of the problem's inputs and outputs without allocating them (the meta device),
    before its first case is built; the workspace is guessed as one more output. Zeros where
    the reference cannot run on the meta device."""

    def sizes() -> tuple[int, int]:
        # meta tensors draw from no generator: no lock is held unless a call names a device
        with torch.device("meta"):
            inputs = list(ref.module.get_inputs())
            model = ref.module.Model(*ref.init_inputs)
            with torch.no_grad():
                out = model(*inputs)
        return sum(t.numel() * t.element_size() for t in flatten_tensors(inputs)), output_bytes(out)

    try:
        start = must_hold(ref.problem.reference_src, ref.device)
        (in_bytes, out_bytes), _ = seeded(sizes, INIT_SEED, start)
    except Exception:
        return Footprint(0, 0, 0, ref.weights)
    return Footprint(in_bytes, out_bytes, out_bytes, ref.weights)
