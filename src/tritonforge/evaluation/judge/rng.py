"""Torch's global random generators in the judge process: one lock per generator, and a seeded
call that holds and seeds exactly the generators it uses.

Covers: `seeded(fn, seed, start)`, which runs `fn()` with the locks of the generators in
`start` held and those generators seeded with `seed` (what `torch.manual_seed(seed)` gives them;
it seeds every generator, so for the generators `fn` uses the values are the same). A dispatch
mode watches every op that draws from a generator (ATen's `nondeterministic_seeded` tag): one
that would draw from a global generator not held (the CPU's, or a device's, `generator_key`) is
stopped before it runs, and `fn` is run again from the start with that generator held and seeded
too. An explicit private `torch.Generator` and the meta device draw from no global generator.
It returns the generators `fn` drew from, which callers keep as the next call's `start`.
Seeding is no op the guard sees: a source that may seed or set a global generator itself
(`reseeds`: manual_seed, set_rng_state, fork_rng, ...) has its calls hold `every_generator`.
Why: building a large reference model on the CPU (a 32768x32768 `nn.Linear` initialises for
7-9 s) holds only the CPU generator, so an input draw on a GPU, which holds that GPU's
generator, does not wait for it, while inputs and weights stay those of `torch.manual_seed`.
Locks are taken in one order (the CPU's first, then devices by name); a call is not
re-entrant. Does not cover: randomness outside torch (`random`, numpy: torch.manual_seed does not
seed them either), nor a reference's forward, which draws unseeded and unlocked (dropout; the
determinism check of problem_check.py).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

T = TypeVar("T")
_LOCKS: dict[str, threading.Lock] = {}
_GUARD = threading.Lock()
# seeding or setting a global generator is a call, not an op with values the guard can see
# (torch.manual_seed, torch.cuda.manual_seed_all, a bare manual_seed(...), set_rng_state, ...;
# not a private generator's g.manual_seed)
_RESEEDS = re.compile(
    r"set_rng_state|fork_rng|default_generator"
    r"|\b(?:torch|random|cuda|mps|xpu)\s*\.\s*(?:manual_seed|seed)(?:_all)?\b"
    r"|(?<![\w.])manual_seed(?:_all)?\s*\("
)


def generator_lock(key: str) -> threading.Lock:
    """The lock of one global generator ("cpu", "cuda:0", ...)."""
    with _GUARD:
        return _LOCKS.setdefault(key, threading.Lock())


def generator_key(device: torch.device | str) -> str | None:
    """The global generator a draw on `device` uses; None for the meta device (no values)."""
    dev = torch.device(device)
    if dev.type == "meta":
        return None
    if dev.type == "cuda" and dev.index is None:
        return f"cuda:{torch.cuda.current_device()}"
    return str(dev)


def every_generator(device: str) -> frozenset[str]:
    """The CPU's generator, `device`'s and every initialised GPU's."""
    keys = {"cpu"}
    if torch.cuda.is_initialized():
        keys |= {f"cuda:{i}" for i in range(torch.cuda.device_count())}
    key = generator_key(device)
    return frozenset(keys | ({key} if key else set()))


def reseeds(source: str) -> bool:
    """Whether a reference source may seed or set torch's global generators itself (then its
    calls hold every generator: another thread's draw must not see its seed)."""
    return _RESEEDS.search(source) is not None


def must_hold(source: str, device: str) -> frozenset[str]:
    """What every seeded call of a reference's code starts holding: every generator when its
    source `reseeds`, else none (the guard adds those it draws from)."""
    return every_generator(device) if reseeds(source) else frozenset()


def _order(key: str) -> tuple[bool, str]:
    return key != "cpu", key


@contextmanager
def held(keys: Iterable[str]) -> Iterator[None]:
    """Hold the locks of `keys`, taken in the one global order."""
    with ExitStack() as stack:
        for key in sorted(set(keys), key=_order):
            stack.enter_context(generator_lock(key))
        yield


def seed_generator(key: str, seed: int) -> None:
    """Seed one global generator as torch.manual_seed(seed) does."""
    dev = torch.device(key)
    if dev.type == "cpu":
        torch.default_generator.manual_seed(seed)
    elif dev.type == "cuda":
        torch.cuda.init()  # default_generators is filled on initialisation
        torch.cuda.default_generators[dev.index or 0].manual_seed(seed)
    else:
        torch.get_device_module(dev.type).manual_seed(seed)


class Unheld(BaseException):
    """An op was about to draw from a global generator whose lock is not held (a BaseException:
    the reference's own `except Exception` must not swallow it)."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _default_key(gen: torch.Generator) -> str | None:
    """The key of an explicitly passed generator if it is a global one, else None."""
    if gen._cdata == torch.default_generator._cdata:
        return "cpu"
    if torch.cuda.is_initialized():
        for i, g in enumerate(torch.cuda.default_generators):
            if gen._cdata == g._cdata:
                return f"cuda:{i}"
    return None


def op_generator(func: Any, args: tuple, kwargs: dict[str, Any]) -> str | None:
    """The global generator an ATen op would draw from, or None (not random, a private
    generator, the meta device)."""
    if torch.Tag.nondeterministic_seeded not in getattr(func, "tags", ()):
        return None
    gen = kwargs.get("generator")
    if gen is None:
        gen = next((a for a in args if isinstance(a, torch.Generator)), None)
    if gen is not None:
        return _default_key(gen)
    device = kwargs.get("device")
    if device is None:
        tensor = next((t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)), None)
        device = tensor.device if tensor is not None else torch.device("cpu")
    return generator_key(device)


class Guard(TorchDispatchMode):
    """Lets random ops draw only from the generators in `allowed`; records those used."""

    def __init__(self, allowed: frozenset[str]):
        super().__init__()
        self.allowed = allowed
        self.used: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        key = op_generator(func, args, kwargs)
        if key is not None:
            if key not in self.allowed:
                raise Unheld(key)
            self.used.add(key)
        return func(*args, **kwargs)


def seeded(fn: Callable[[], T], seed: int, start: Iterable[str] = ()) -> tuple[T, frozenset[str]]:
    """`fn()` with the global generators it draws from held and seeded with `seed`: starts with
    `start`, and runs `fn` again with one more generator each time it reaches for one not held.
    Returns its result and the generators it drew from."""
    need = set(start)
    while True:
        guard = Guard(frozenset(need))
        with held(need):
            for key in sorted(need, key=_order):
                seed_generator(key, seed)
            try:
                with guard:
                    result = fn()
            except Unheld as miss:
                if miss.key in need:  # cannot happen: the guard allows what is held
                    raise RuntimeError(f"generator {miss.key} held but refused") from None
                need.add(miss.key)
                continue
        return result, frozenset(guard.used)
