"""The import allowlist at runtime, in the worker: the private side of the candidate's `__import__`
and of the stub that stands in for the import system's `_find_and_load`; and which native-code
builders the candidate may not call directly (`builder_entry`, for the audit hook's spawn and
native-code rules).

Two places see imports (both raise `forbidden_import` and an ImportError):
- **The candidate's own import statements** (`guarded_import`, stubs.guarded_import): every one,
  also of a module already in `sys.modules`, against import_policy.refusal, names taken with
  `from M import a` resolved to what they are (`from torch import os` is the module os). The
  same `__import__` is also what C code calls when it imports while the candidate's frame is the
  current one (`PyImport_Import`: torch.tensor imports torch.storage); such calls, told apart by
  the frame's instruction (not an IMPORT_NAME), only meet the families never loaded.
- **Every new module load** (`load`, the stub at `importlib._bootstrap._find_and_load`, which the
  C import path, `importlib.import_module`, `__import__` and every other route reach; the
  `import` audit event is a second net for the C path). Who chose the module's name decides:
  the candidate's import statement, or `importlib.import_module` (or pydoc, pkgutil, runpy)
  whose nearest caller outside the stdlib is the candidate (laundering through
  `functools.singledispatch`, `map()` and the like counts as the candidate's): the allowlist; an
  import in stdlib code on the candidate's behalf: only the families never loaded on its behalf
  (import_policy.ON_BEHALF); a library (torch, Triton) or C code: only the families never loaded
  at all while the candidate is on the stack (sub-interpreters, signals, raw memory, the
  evaluator: import_policy.never).
A module that does not exist is left to fail (`import_error`: the candidate's mistake).
Names are copied to exact `str` before use and arguments of other types are refused, so none of
the candidate's code runs in these handlers.
Does not cover: modules already loaded and reached as attributes (the static rules; the audit
hook's events on what such modules do), or the static rule (judge/import_rules.py).
"""

from __future__ import annotations

import importlib
import os
import sys
from importlib.machinery import PathFinder
from typing import Any

from tritonforge.evaluation.sandbox import import_policy as policy
from tritonforge.evaluation.sandbox.audit_state import violation

_IMPORT_NAME = 108  # dis.opmap["IMPORT_NAME"] on CPython 3.11 (checked in tests)
_BY_NAME = frozenset({"pydoc", "pkgutil", "runpy", "zipimport", "imp"})  # lookups by a string
_builtin_names = frozenset(sys.builtin_module_names)
_STUBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stubs.py")
_IMPORTLIB = os.path.dirname(importlib.__file__) + os.sep


def _exact(name: Any) -> str | None:
    """`name` as an exact str (a str subclass could run code when hashed or compared)."""
    return str.__str__(name) if issubclass(type(name), str) else None


def _namespace(name: str) -> dict[str, Any] | None:
    return policy.namespace(sys.modules.get(name))


def _exists(name: str) -> bool:
    """The top-level package of `name` can be found (builtin, or on sys.path)."""
    root = name.split(".")[0]
    if root in sys.modules or root in _builtin_names:
        return True
    try:
        return PathFinder.find_spec(root) is not None
    except Exception:  # a broken path entry: count it as existing (the import is refused)
        return True


def _refuse(what: str, why: str) -> None:
    violation("forbidden_import", f"{what}: {why}")
    raise ImportError(f"blocked by the evaluation sandbox: {what}: {why}")


def guarded_import(hook: Any, args: tuple, frame: Any) -> None:
    """Handler of `tritonforge.import` (the candidate's `__import__`). Its import statements
    get the whole policy; other calls (C code importing on its own while the candidate's frame
    is the current one, `PyImport_Import` in torch.tensor; or an explicit `__import__` call,
    a static dynamic_code) only the families never loaded while the candidate runs."""
    _key, name, fromlist, level, box = args
    exact = _exact(name)
    names = () if fromlist is None else fromlist
    if exact is None or type(names) not in (tuple, list) or type(level) is not int:
        _refuse("an import with unusual arguments", "only import statements are allowed")
    items = tuple(_exact(n) for n in names)
    if None in items:
        _refuse(f"from {exact} import ...", "only names may be imported")
    with hook.quiet():
        caller = frame.f_back
        statement = caller is not None and caller.f_code.co_code[caller.f_lasti] == _IMPORT_NAME
    backend = hook.armed.backend if hook.armed is not None else "triton"
    if statement:
        why = policy.refusal(exact, items, level, backend, _namespace)
    else:
        why = policy.refusal(exact) if policy.never(exact) else None
    if why and (level or _exists(exact)):
        _refuse(f"import of {exact} by the candidate", why)
    box.append(hook.real_import)


def _importer(frame: Any) -> tuple[Any, str]:
    """The frame that asked for a module, past the import system's frames and our stubs, and
    how: "statement" (an import statement of its own), "by_name" (through
    `importlib.import_module`), "call" (C code importing on its own, or `__import__` called as
    a function). Call quietly."""
    api, f = False, frame
    while f is not None:
        code = f.f_code
        name = code.co_filename
        if name.startswith("<frozen importlib") or name == _STUBS or name.startswith(_IMPORTLIB):
            api = api or code.co_name == "import_module"
            f = f.f_back
            continue
        if api:
            return f, "by_name"
        return f, "statement" if code.co_code[f.f_lasti] == _IMPORT_NAME else "call"
    return None, "call"


def decide_load(hook: Any, name: str, frame: Any) -> str | None:
    """Why loading the module `name` now is refused (None: allowed); see the module docstring."""
    if name == "encodings" or name.startswith("encodings."):
        return None  # codecs, loaded by the interpreter's C code for str.encode and the like
    with hook.quiet():
        if not hook.origin(frame).on_stack:
            return None
        if policy.never(name):
            return policy.refusal(name) or "never loaded while the candidate runs"
        importer, how = _importer(frame)
        kind = hook.kind(importer)
        nearest = hook.origin(importer).nearest if importer is not None else "none"
        module = hook.module_of(importer) if kind == "stdlib" else ""
    if kind == "candidate":
        chosen = how != "call"  # its statement or its string (C code's own imports are not)
    else:  # its string through the stdlib (importlib, pydoc, functools.singledispatch, ...)
        chosen = nearest == "candidate" and (how == "by_name" or module in _BY_NAME)
    if not chosen:
        if kind == "stdlib" and nearest == "candidate" and name.split(".")[0] in policy.ON_BEHALF:
            return f"the module {name} is not loaded on the candidate's behalf"
        return None
    backend = hook.armed.backend if hook.armed is not None else "triton"
    if policy.allowed(name, backend) or policy.package_step(name, backend):
        return None
    return policy.refusal(name, (), 0, backend)


def load(hook: Any, args: tuple, frame: Any) -> None:
    """Handler of `tritonforge.load` (the stub at `_find_and_load`): every new module load."""
    key, name, box = args
    exact = _exact(name)
    if exact is None:
        _refuse("a load of a module by a non-string name", "refused")
    why = decide_load(hook, exact, frame.f_back)
    if why and _exists(exact):
        _refuse(f"loading {exact}", why)
    box.append(hook.trips[key].original)


# Modules that compile or load native code: a candidate that calls into them directly (also
# through stdlib wrappers) may not spawn a compiler or load a library from there; Triton's own
# compilation during a launch enters through the launch stub and Triton's JIT instead.
_BUILDERS = tuple(
    os.sep + p
    for p in (
        os.path.join("triton", "runtime", "build.py"),
        os.path.join("triton", "runtime", "cache.py"),
        os.path.join("triton", "compiler", ""),
        os.path.join("triton", "backends", ""),
        os.path.join("triton", "tools", ""),
    )
)
_EXTENSION_BUILDER = os.sep + os.path.join("torch", "utils", "cpp_extension.py")


def builder_entry(entry: str, backend: str) -> bool:
    """Whether the candidate's call that led to a spawn or a native load entered a native-code
    builder directly (`triton.runtime.build.compile_module_from_src`, `triton.compile`, the
    backends' launcher builders; `torch.utils.cpp_extension` unless the backend is CUDA)."""
    if backend != "cuda" and entry.endswith(_EXTENSION_BUILDER):
        return True
    return any(b in entry for b in _BUILDERS)


def import_event_rule(args: tuple) -> str | None:
    """The rule an `import` audit event may break: `native_code` for an extension module (the
    event carries its file), `forbidden_import` for the families never loaded while the
    candidate runs or never on its behalf (`new_import_allowed` decides by origin)."""
    if len(args) > 1 and args[1] is not None:
        return "native_code"
    name = _exact(args[0]) if args else None
    if name is None or policy.never(name) or name.split(".")[0] in policy.ON_BEHALF:
        return "forbidden_import"
    return None


def new_import_allowed(hook: Any, args: tuple, o: Any) -> bool:
    """The `import` audit event (the C import path; the hook is busy): a second net behind the
    load stub for the families never loaded while the candidate runs and those never loaded on
    its behalf through the stdlib."""
    name = _exact(args[0]) if args else None
    if name is None or policy.never(name):
        return False
    return not (o.nearest == "candidate" and name.split(".")[0] in policy.ON_BEHALF)
