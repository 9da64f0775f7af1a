"""What a candidate may import: an allowlist, one policy for the static rules (judge/import_rules.py)
and the runtime guard (audit_hook.py), kept on the sandbox side because the guard needs it inside
the candidate's process.

Covers: `ALLOWED` (modules a candidate may import, exactly or with their submodules), the modules
of one backend only (`torch.utils.cpp_extension` for CUDA candidates), the Inductor runtime
helpers (inductor_compat.py: whole modules, or named helpers taken with `from M import name`),
`DENIED` (families of modules that stay out of reach, with the reason; used for attribute routes
and for imports made on the candidate's behalf), and `refusal()`, which decides one import
statement (`import a.b`, `from a import b, c`). docs/security.md lists the allowlist and why each
family is out. Built from the honest corpora: tests/eval/corpus (legit, field, hybrid,
kernelbench_layout), the built-in solutions, KernelBench's references and 1717 public
LLM-written KernelBench Triton kernels (imports counted in docs/security.md).
Does not cover: where the policy is applied (judge/import_rules.py, audit_hook.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from tritonforge.evaluation.sandbox.inductor_names import ANY, MODULE_NAMES, PREIMPORTABLE, RUNTIME

# module -> True: its submodules too; False: that module only
ALLOWED: dict[str, bool] = {
    # PyTorch: the package, layers and functional ops, custom autograd functions, math namespaces
    "torch": False,
    "torch.nn": True,
    "torch.autograd": False,
    "torch.cuda": False,
    "torch.cuda.amp": False,
    "torch.amp": False,
    "torch.fft": False,
    "torch.linalg": False,
    "torch.special": False,
    "torch.utils.checkpoint": False,
    # the candidate's own settings (issue 31: cuDNN/cuBLAS flags) and torch.jit's eager no-op
    # markers (`ignore`, `unused`; scripting and tracing stay generated_code)
    "torch.backends": True,
    "torch.jit": False,
    # Triton: the package (jit, autotune, Config, cdiv), the kernel language with libdevice, and
    # `from triton.runtime import driver` (device properties, as in Triton's tutorials)
    "triton": False,
    "triton.language": True,
    "triton.runtime": False,
    # what KernelBench's references import (Mamba's rearrange; level 4's Hugging Face models)
    "einops": True,
    "transformers": False,
    "transformers.models": True,
    "transformers.activations": False,
    "transformers.modeling_utils": False,
    "transformers.modeling_outputs": False,
    "transformers.pytorch_utils": False,
    "transformers.configuration_utils": False,
    "transformers.cache_utils": False,
    # the stdlib modules kernels use
    "__future__": False,
    "math": False,
    "numbers": False,
    "typing": False,
    "abc": False,
    "enum": False,
    "dataclasses": False,
    "collections": False,
    "collections.abc": False,
    "functools": False,
    "itertools": False,
    "contextlib": False,
    "warnings": False,
    "logging": False,
    "random": False,
}
# modules only one backend may import (CUDA candidates build their extension with load_inline)
BACKEND_ONLY: dict[str, frozenset[str]] = {"cuda": frozenset({"torch.utils.cpp_extension"})}


@dataclass(frozen=True)
class Family:
    """Modules that stay out of reach, and why."""

    name: str
    modules: frozenset[str]  # a name covers its submodules
    why: str
    never: bool = False  # not even loaded on the candidate's behalf by a library


DENIED: tuple[Family, ...] = (
    Family(
        "sub-interpreters",
        frozenset(
            {"_xxsubinterpreters", "_xxinterpchannels", "_interpreters", "_interpqueues"}
            | {"_interpchannels", "interpreters", "concurrent.interpreters"}
        ),
        "audit hooks are per interpreter: a sub-interpreter runs with none",
        never=True,
    ),
    Family(
        "signals",
        frozenset({"signal", "_signal", "faulthandler"}),
        "a handler runs the candidate's code at any moment, also inside the audit's launch window",
        never=True,
    ),
    Family(
        "native code and raw memory",
        frozenset({"ctypes", "_ctypes", "cffi", "_cffi_backend", "numpy", "mmap", "array"})
        | frozenset({"pyarrow", "cupy", "numba", "jax", "jaxlib"}),
        "an address becomes a buffer (ctypes, numpy's stride tricks and array interface, "
        "foreign-memory libraries): host memory without any torch call",
        never=True,
    ),
    Family(
        "native code builders",
        frozenset({"triton.runtime.build", "triton.compiler", "triton.backends", "triton._C"})
        | frozenset({"triton.testing", "triton.tools", "torch.utils.cpp_extension"}),
        "they compile and load native code from a Triton or PyTorch frame (the CUDA backend "
        "may use cpp_extension); triton.testing holds the benchmark helpers the judge relies on",
    ),
    Family(
        "introspection",
        frozenset({"gc", "inspect", "sys", "builtins", "types", "dis", "traceback", "weakref"})
        | frozenset({"linecache", "tracemalloc", "string", "operator", "copy"}),
        "frames, the heap, other modules' state, and helpers that look attributes up by a "
        "computed name (string.Formatter, operator.attrgetter/methodcaller)",
    ),
    Family(
        "serialisation",
        frozenset({"pickle", "_pickle", "marshal", "copyreg", "shelve", "dill", "cloudpickle"})
        | frozenset({"json", "struct"}),
        "code or objects rebuilt from bytes, and the worker's own serialisers",
    ),
    Family(
        "import by name and code objects",
        frozenset({"importlib", "pydoc", "pkgutil", "runpy", "zipimport", "imp", "code"})
        | frozenset({"codeop", "ast"}),
        "any loaded module (the evaluator's too) without an import statement; code compiled "
        "from strings",
    ),
    Family(
        "processes, threads and the OS",
        frozenset({"os", "posix", "nt", "subprocess", "_posixsubprocess", "multiprocessing"})
        | frozenset({"_multiprocessing", "pty", "resource", "fcntl", "threading", "_thread"})
        | frozenset({"concurrent", "asyncio", "atexit", "shutil", "tempfile", "pathlib", "io"})
        | frozenset({"select", "selectors", "queue", "time", "hashlib", "secrets"}),
        "files, processes, signals to other processes, threads, clocks, and the worker's own "
        "hashing and tokens",
    ),
    Family(
        "network",
        frozenset({"socket", "_socket", "ssl", "urllib", "http", "requests", "httpx", "email"}),
        "no candidate needs the network",
    ),
    Family(
        "the evaluator",
        frozenset({"tritonforge"}),
        "the audit's own state",
        never=True,
    ),
)
# New imports refused on the candidate's behalf even through the stdlib (not only as its own
# import statements): its call chain up to the import holds no library frame.
ON_BEHALF = frozenset(
    {"subprocess", "_posixsubprocess", "socket", "_socket", "ssl", "multiprocessing", "pty"}
    | {"urllib", "http", "requests", "httpx", "asyncio", "pickle", "marshal", "code", "codeop"}
)


def _under(name: str, roots: frozenset[str] | set[str]) -> str | None:
    """The entry of `roots` that `name` is or lies under, if any."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        if head in roots:
            return head
    return None


def family(name: str) -> Family | None:
    """The denied family of the module `name` (a family entry covers its submodules)."""
    for f in DENIED:
        if _under(name, f.modules):
            return f
    return None


def never(name: str) -> bool:
    """Modules never loaded while the candidate is on the stack, on anyone's behalf."""
    f = family(name)
    return f is not None and f.never


def allowed(name: str, backend: str = "triton") -> bool:
    """Whether the module `name` may be imported whole by a candidate of `backend`."""
    if name in BACKEND_ONLY.get(backend, frozenset()) or name in PREIMPORTABLE:
        return name != "torch._inductor.select_algorithm"  # only its extern_kernels
    if name in ALLOWED:
        return True
    head = _under(name, set(ALLOWED))
    return head is not None and ALLOWED[head] and family(name) is None


def package_step(name: str, backend: str = "triton") -> bool:
    """A package on the way to an allowed module (`torch.utils`, `torch._inductor.runtime`)."""
    prefix = name + "."
    inductor = {".".join(m) for m in RUNTIME}
    every = set(ALLOWED) | BACKEND_ONLY.get(backend, frozenset()) | inductor
    return any(m.startswith(prefix) for m in every)


def _helper(module: str, name: str) -> bool:
    """`from module import name` of an Inductor runtime helper (inductor_compat.RUNTIME)."""
    names = RUNTIME.get(tuple(module.split(".")), frozenset())
    if names is ANY:
        return name not in MODULE_NAMES and not name.startswith("__")
    return name in names


_MODULE_DICT = ModuleType.__dict__["__dict__"]  # a module's namespace, read without its class


def namespace(module: object) -> dict[str, Any] | None:
    """The namespace of a module object (None for anything else), read without running any
    code a module subclass might define."""
    if not issubclass(type(module), ModuleType):
        return None
    ns = _MODULE_DICT.__get__(module)
    return ns if type(ns) is dict else None


def module_name(value: object) -> str | None:
    """`value.__name__` if `value` is a module (read from its namespace), else None."""
    ns = namespace(value)
    name = ns.get("__name__") if ns is not None else None
    return name if type(name) is str else None


Namespace = Callable[[str], dict[str, Any] | None]
HasSubmodule = Callable[[str], bool]


def refusal(
    name: str,
    fromlist: Sequence[str] = (),
    level: int = 0,
    backend: str = "triton",
    loaded: Namespace = lambda _n: None,
    has_submodule: HasSubmodule = lambda _n: False,
) -> str | None:
    """Why `import name` / `from name import *fromlist` is refused, or None. `loaded(m)`: the
    namespace of the module `m` if it is loaded (what a name taken from it is);
    `has_submodule(m)`: `m` exists as a module that is not loaded yet (a name not found in a
    package would import it; in the worker the load itself is checked, import_guard.py)."""
    if level:
        return "a relative import"
    if not name or not all(p.isidentifier() for p in name.split(".")):
        return f"an import of {name!r}"
    if not fromlist:
        return None if allowed(name, backend) else _why(name)
    whole = allowed(name, backend)
    if not (whole or package_step(name, backend) or tuple(name.split(".")) in RUNTIME):
        return _why(name)
    members = loaded(name)
    for item in fromlist:
        if type(item) is not str:
            return f"from {name} import {item!r}"
        full = f"{name}.{item}"
        value = members.get(item) if members is not None and item != "*" else None
        real = module_name(value)
        if value is None and item != "*":  # a loaded submodule not bound in its package
            sub = loaded(full)
            real = sub.get("__name__") if sub is not None else None
            real = real if type(real) is str else None
        if real is not None:
            if not allowed(real, backend):
                return f"{full} is the module {real}: " + _why(real)
        elif allowed(full, backend) or _helper(name, item):
            continue
        elif item == "*" or (value is None and has_submodule(full)):
            if not allowed(full if item != "*" else name, backend):
                return _why(full if item != "*" else name)
        elif not whole:
            return f"from {name} import {item}: only named helpers may be taken from {name}"
    return None


def _why(name: str) -> str:
    f = family(name)
    if f is not None:
        return f"the module {name} is not allowed in a candidate ({f.name}: {f.why})"
    return (
        f"the module {name} is not on the candidate's import allowlist (torch, triton, "
        "einops, transformers and a few stdlib modules: docs/security.md)"
    )
