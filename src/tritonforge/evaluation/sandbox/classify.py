"""Turning a candidate's exception into a status and a message a model can act on.

Covers: `classify_exception` (status by exception type and message, e.g. Triton compile errors,
out-of-resources, illegal memory access; CUDA and HIP error texts), `is_device_oom` (an exception
that means the device ran out of memory, including the caching allocator's NVML asserts and
library handles that could not be allocated; the judge uses it on its own errors too),
`requested_bytes` (the figure in a CUDA out-of-memory message), `memory_facts` (the process's
and the device's memory at such an error) and `trim_traceback` (keeps the candidate's own frames
and the final error, drops framework noise, bounds the length). Runs in the worker; returns
plain strings so nothing crosses the process boundary but JSON. Does not cover: crash signals
and timeouts (decided by the judge from exit codes and deadlines).
"""

from __future__ import annotations

import re
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
# of those, the ones that mean device memory ran out (Triton's "out of resource: shared memory"
# does not), and what the driver, libraries and allocator say when it does
_DEVICE_OOM_TEXT = (
    "cuda out of memory",
    "hip out of memory",
    "hiperroroutofmemory",
    "cuda_error_out_of_memory",
    "cudaerrormemoryallocation",
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
)
_TRIED = re.compile(r"tried to allocate ([0-9.]+) ?([kmgt]i?b)", re.IGNORECASE)
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _chain(exc: BaseException) -> list[BaseException]:
    out, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def is_device_oom(exc: BaseException) -> bool:
    """The exception (or one in its chain) says the device ran out of memory."""
    for e in _chain(exc):
        if type(e).__name__ == "OutOfMemoryError":
            return True
        text = str(e).lower()
        if any(k in text for k in _DEVICE_OOM_TEXT):
            return True
        # the caching allocator asks NVML about memory while failing an allocation; in a sandbox
        # without NVML access that turns into an internal assert instead of the OOM message
        if "nvml_success" in text and ("cudacachingallocator" in text or "assert" in text):
            return True
    return False


def requested_bytes(text: str) -> int | None:
    """Bytes of the failed allocation in a CUDA OOM message ("Tried to allocate 2.00 GiB")."""
    m = _TRIED.search(text)
    if m is None:
        return None
    return int(float(m.group(1)) * _UNITS.get(m.group(2)[0].lower(), 1))


def memory_facts(device: str, message: str) -> dict[str, int]:
    """Device memory figures at an out-of-memory error (whatever can still be read)."""
    facts: dict[str, int] = {}
    asked = requested_bytes(message)
    if asked is not None:
        facts["requested"] = asked
    if not device.startswith("cuda"):
        return facts
    import torch

    for name, fn in (
        ("allocated", torch.cuda.memory_allocated),
        ("reserved", torch.cuda.memory_reserved),
    ):
        try:
            facts[name] = int(fn())
        except Exception:
            pass
    try:
        free, total = torch.cuda.mem_get_info()
        facts["device_free"], facts["device_total"] = int(free), int(total)
    except Exception:
        pass
    return facts


def classify_exception(exc: BaseException, phase: str, in_kernel: bool = False) -> Status:
    """Status for an exception raised by candidate code in `phase` (import|init|forward)."""
    names = " ".join(f"{type(e).__module__}.{type(e).__name__}" for e in _chain(exc))
    text = " ".join(str(e) for e in _chain(exc)).lower()
    if any(k in text for k in ILLEGAL_ACCESS_TEXTS):
        return Status.ILLEGAL_MEMORY_ACCESS
    if "defaultcpuallocator" in text or "can't allocate memory" in text:
        return Status.RESOURCE_LIMIT  # host allocation refused under the sandbox's memory rlimit
    if (
        is_device_oom(exc)
        or "OutOfResources" in names
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
        # (no path before the candidate is loaded: replacing "" would garble every character)
        lines.append(detail.replace(candidate_path, "candidate.py") if candidate_path else detail)
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
