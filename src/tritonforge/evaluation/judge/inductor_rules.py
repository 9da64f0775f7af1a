"""Which Inductor names a candidate may use: the runtime helpers of KernelBook/KernelLLM output,
never the compiler.

KernelBook (and KernelLLM, trained on it) writes kernels the way Inductor prints them: plain
`@triton.jit` kernels named `triton_poi_fused_...`, launched as `kernel[grid(n)](...)` with
`grid` from `torch._inductor.runtime.triton_heuristics`, kernel-side helpers from
`triton_helpers` (`maximum`, `libdevice`, ...), buffers from `torch._C._dynamo.guards`
(`_empty_strided_cuda`, `assert_size_stride`, `_reinterpret_tensor`), the raw stream from
`torch._C._cuda_getCurrentRawStream`, and matmuls/convolutions through
`torch._inductor.select_algorithm.extern_kernels` (plain aten ops: PyTorch compute, judged by
the mode like any other). None of these generates code; the kernels are the candidate's own.

Covers: `allowed(path)` for a resolved import or attribute path, and `preimports(paths)`, the
runtime modules the worker imports before the candidate (sandbox/inductor_compat.py).
Everything else under `torch._inductor`, `torch._dynamo` or `torch._C` stays blocked by
checks.py (`generated_code`, `dispatcher_escape`): `compile_fx`, `torch._inductor.compile_*`,
`standalone_compile`, codegen, `async_compile` (which builds kernels from source strings).
Does not cover: the rules themselves (checks.py) or running anything.
"""

from __future__ import annotations

from collections.abc import Iterable

from tritonforge.evaluation.sandbox.inductor_names import ANY, MODULE_NAMES, PREIMPORTABLE, RUNTIME

__all__ = ["ANY", "MODULE_NAMES", "RUNTIME", "allowed", "outside", "preimports"]

# Inductor's kernel-side helpers (@triton.jit functions such as maximum/max2/promote_to_tensor,
# and libdevice/math from triton.language): usable inside a kernel body like triton.language.
KERNEL_HELPERS = ("torch", "_inductor", "runtime", "triton_helpers")
# Modules that may be imported whole (`from torch._inductor.runtime import triton_helpers`).
WHOLE = {m for m in RUNTIME if ".".join(m) in PREIMPORTABLE and m[-1] != "select_algorithm"}
# The package steps on the way to them (`from torch._inductor.runtime import ...`).
_PARENTS = {("torch", "_inductor", "runtime")}


def _match(path: tuple[str, ...]) -> tuple[tuple[str, ...], str | None] | None:
    """(module, name taken from it or None) for the longest RUNTIME module `path` starts with."""
    for module in sorted(RUNTIME, key=len, reverse=True):
        if path[: len(module)] == module:
            return module, path[len(module)] if len(path) > len(module) else None
    return None


def allowed(path: tuple[str, ...]) -> bool:
    """Whether a resolved import/attribute path is an Inductor runtime helper (or a package on
    the way to one, or an attribute of an allowed name, e.g. `extern_kernels.mm`)."""
    if path in _PARENTS:
        return True
    hit = _match(path)
    if hit is None:
        return False
    module, name = hit
    if name is None:
        return module in WHOLE
    names = RUNTIME[module]
    if names is ANY:
        return name not in MODULE_NAMES and not name.startswith("__")
    return name in names


def preimports(paths: Iterable[tuple[str, ...]]) -> list[str]:
    """The runtime modules (PREIMPORTABLE) that the allowed `paths` reach, in a fixed order."""
    wanted = set()
    for path in paths:
        hit = _match(path)
        if hit is not None and ".".join(hit[0]) in PREIMPORTABLE:
            wanted.add(".".join(hit[0]))
    return [m for m in PREIMPORTABLE if m in wanted]


def outside(path: tuple[str, ...]) -> str | None:
    """The rule for a whole path that goes *through* an allowed helper module to something that
    is not an allowed helper (`triton_heuristics.torch.compile`, `hints.torch._dynamo`), or None.
    Needed because the helper modules themselves may be imported and aliased."""
    if allowed(path):
        return None
    hit = _match(path)
    under_parent = any(path[: len(p)] == p and len(path) > len(p) for p in _PARENTS)
    if hit is None and not under_parent:
        return None
    return "dispatcher_escape" if path[:2] == ("torch", "_C") else "generated_code"
