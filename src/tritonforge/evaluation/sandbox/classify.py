"""Turning a candidate's exception into a status and a message a model can act on.

Covers: `classify_exception` (status by exception type and message, e.g. Triton compile errors,
out-of-resources, illegal memory access; CUDA and HIP error texts) and `trim_traceback` (keeps the candidate's own frames
and the final error, drops framework noise, bounds the length). Runs in the worker; returns
plain strings so nothing crosses the process boundary but JSON. Does not cover: crash signals
and timeouts (decided by the judge from exit codes and deadlines).
"""

from __future__ import annotations

import traceback
from typing import Any

from tritonforge.types import Status

MAX_MESSAGE = 4000
# Lower-case fragments of CUDA and HIP (ROCm) error texts. The HIP ones follow the HIP runtime's
# error names and messages (hipErrorIllegalAddress, "Memory access fault by GPU node", ...);
# they are unit-tested on strings only: no AMD GPU has produced them for this code.
ILLEGAL_ACCESS_TEXTS = (
    "illegal memory access",
    "misaligned address",
    "illegal instruction",
    "hiperrorillegaladdress",
    "memory access fault by gpu",
)
OUT_OF_RESOURCES_TEXTS = (
    "out of resource",
    "cuda out of memory",
    "hip out of memory",
    "hiperroroutofmemory",
)
NO_BINARY_TEXTS = ("hiperrornobinaryforgpu", "invalid device function")


def _chain(exc: BaseException) -> list[BaseException]:
    out, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def classify_exception(exc: BaseException, phase: str, in_kernel: bool = False) -> Status:
    """Status for an exception raised by candidate code in `phase` (import|init|forward)."""
    names = " ".join(f"{type(e).__module__}.{type(e).__name__}" for e in _chain(exc))
    text = " ".join(str(e) for e in _chain(exc)).lower()
    if any(k in text for k in ILLEGAL_ACCESS_TEXTS):
        return Status.ILLEGAL_MEMORY_ACCESS
    if "defaultcpuallocator" in text or "can't allocate memory" in text:
        return Status.RESOURCE_LIMIT  # host allocation refused under the sandbox's memory rlimit
    if (
        "OutOfResources" in names
        or "OutOfMemoryError" in names
        or any(k in text for k in OUT_OF_RESOURCES_TEXTS)
    ):
        return Status.OUT_OF_RESOURCES
    if isinstance(exc, MemoryError):
        return Status.RESOURCE_LIMIT
    if (
        "CompilationError" in names
        or "triton.compiler" in names
        or "PTXASError" in names
        or "InterpreterError" in names  # the CPU interpreter wraps errors raised in a kernel body
        or "error building extension" in text  # CUDA C++ backend: nvcc/ninja output follows
        or any(k in text for k in NO_BINARY_TEXTS)
        or in_kernel
    ):
        return Status.COMPILE_ERROR
    if phase == "import":
        return Status.SYNTAX_ERROR if isinstance(exc, SyntaxError) else Status.IMPORT_ERROR
    if phase == "init":
        return Status.INIT_ERROR
    return Status.RUNTIME_ERROR


def trim_traceback(exc: BaseException, candidate_path: str, limit: int = MAX_MESSAGE) -> str:
    """The exception text plus the traceback frames in the candidate's file (others elided)."""
    lines: list[str] = []
    for e in reversed(_chain(exc)):
        frames = traceback.extract_tb(e.__traceback__)
        mine = [f for f in frames if f.filename == candidate_path]
        if mine:
            lines.append("Traceback (candidate frames only):")
            for f in mine[-8:]:
                lines.append(f'  File "candidate.py", line {f.lineno}, in {f.name}')
                if f.line:
                    lines.append(f"    {f.line.strip()}")
        detail = "".join(traceback.format_exception_only(type(e), e)).strip()
        lines.append(detail.replace(candidate_path, "candidate.py"))
    text = "\n".join(lines)
    if len(text) > limit:
        head = limit // 3
        text = text[:head] + "\n... [trimmed] ...\n" + text[-(limit - head - 20) :]
    return text


def raised_in_kernel(exc: BaseException, kernel_codes: set) -> bool:
    """True if the innermost candidate frame of the traceback is inside a @triton.jit body."""
    inner = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in kernel_codes:
            inner = True
        tb = tb.tb_next
    return bool(inner)


def kernel_codes(module: Any) -> set:
    """Code objects of the module's @triton.jit bodies (through autotune/heuristics wrappers)."""
    import types

    codes = set()
    for value in vars(module).values():
        if type(value).__name__ not in (
            "JITFunction",
            "InterpretedFunction",
            "Autotuner",
            "Heuristics",
        ):
            continue
        fn = value
        for _ in range(4):
            if isinstance(fn, types.FunctionType):
                codes.add(fn.__code__)
                break
            fn = getattr(fn, "fn", None)
    return codes
