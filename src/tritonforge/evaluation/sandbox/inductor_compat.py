"""Inductor runtime helpers for KernelBook/KernelLLM-style candidates, prepared before import.

Covers: `PREIMPORTABLE`, the Inductor *runtime* modules a candidate may use (launch-grid and
autotuning helpers, the kernel-side `triton_helpers`, hints, the `extern_kernels` namespace);
`RUNTIME`, the names a candidate may take from each (read by judge/inductor_rules.py and by the
import allowlist, import_policy.py, in the worker);
`prepare(modules)`, which the worker calls before the audit is armed: it imports those modules
in trusted context (their import reads caches and configuration files that the candidate itself
may not touch) and restores the classic `grid(*numels)` helper where the installed PyTorch no
longer has it (KernelBook was generated with PyTorch 2.5, which had it; 2.9 removed it, so every
such candidate would fail to import for a reason that is not its own).
Does not cover: which source constructs are allowed (judge/inductor_rules.py); the compiler
(`torch.compile`, `compile_fx`, `torch._inductor.compile_*`) is never imported here and stays
blocked by the static rules and the `torch.compile` tripwire.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from tritonforge.evaluation.sandbox.inductor_names import (  # noqa: F401 (re-exported)
    ANY,
    HEURISTICS,
    MODULE_NAMES,
    PREIMPORTABLE,
    RUNTIME,
)


def _cdiv(n: int, block: int) -> int:
    return -(-n // block)


def classic_grid(*numels: int) -> Callable[[dict[str, Any]], tuple[int, int, int]]:
    """PyTorch 2.5's `triton_heuristics.grid`: the last numel is x, then y, then z; each grid
    dimension is numel / its XBLOCK/YBLOCK/ZBLOCK meta-parameter (the numel itself when the
    kernel has no such block, 1 when there is no such numel)."""
    if not 1 <= len(numels) <= 3:
        raise AssertionError(f"invalid size for numels {len(numels)}")
    dims = list(reversed(numels)) + [None] * (3 - len(numels))  # x, y, z

    def grid_fn(meta: dict[str, Any]) -> tuple[int, int, int]:
        out = []
        for numel, block in zip(dims, ("XBLOCK", "YBLOCK", "ZBLOCK")):
            if numel is None:
                out.append(1)
            elif meta.get(block) is None:
                out.append(int(numel))
            else:
                out.append(_cdiv(int(numel), int(meta[block])))
        return (out[0], out[1], out[2])

    return grid_fn


def prepare(modules: Iterable[str]) -> list[str]:
    """Import the requested runtime modules (unknown names are ignored); with the heuristics
    module, the audit's record of Inductor's launchers (audit_launch.install_inductor) and
    `grid` where missing. Returns notes for the verdict (what was restored)."""
    notes: list[str] = []
    for name in modules:
        if name not in PREIMPORTABLE:
            continue
        mod = importlib.import_module(name)
        if name != HEURISTICS:
            continue
        from tritonforge.evaluation.sandbox import audit_launch

        audit_launch.install_inductor()
        if not hasattr(mod, "grid"):
            mod.grid = classic_grid  # type: ignore[attr-defined]
            notes.append(
                "this PyTorch has no triton_heuristics.grid (removed after 2.5): the classic "
                "grid helper was provided"
            )
    return notes
