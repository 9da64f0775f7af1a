"""The import allowlist as a static rule (`forbidden_import`): import statements, imports by name,
and modules of a denied family reached as attributes of allowed ones.

Covers: `import_refusal(node, backend)` for one `import`/`from ... import` statement (the policy
of sandbox/import_policy.py, the names taken resolved against the modules loaded in the judge,
which has the worker's packages), and `path_refusal(path, backend)` for a resolved name path
(checks.py's resolver: import aliases, `getattr(X, "name")`, `importlib.import_module("x")`,
`__import__("x")`, `pydoc.locate("x")`, `sys.modules["x"]`): its root must be importable, and no
step may be a module of a denied family (`torch.os`, `triton.language.extra.pkgutil`,
`logging.threading`, `triton.runtime.build`). Steps are resolved through the judge's own loaded
modules (a plain `__dict__` lookup, which runs no code); where a module is not loaded here, the
spelling decides. Does not cover: the other static rules (checks.py) or the runtime guard
(audit_hook.py), which applies the same policy in the worker.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from types import ModuleType

from tritonforge.evaluation.sandbox import import_policy as policy

Path = tuple[str, ...]
# names refused anywhere after the root, however they resolve (torch.multiprocessing too)
_ALWAYS_BY_NAME = frozenset(
    {"threading", "_thread", "concurrent", "multiprocessing", "subprocess", "socket", "ctypes"}
    | {"gc", "importlib", "builtins", "pickle", "marshal", "pydoc", "pkgutil", "runpy", "mmap"}
    | {"weakref", "tritonforge", "_xxsubinterpreters", "_interpreters", "faulthandler"}
)
# module names reached as an attribute whose owner is not loaded in the judge: refused by name
_BY_NAME = frozenset(
    m for f in policy.DENIED for m in f.modules if "." not in m and m not in ("types", "io")
) - {"code", "array", "copy", "string", "time", "queue", "email", "ast", "select"}


def _has_submodule(full: str) -> bool:
    """`full` names a module of a package loaded here (found without importing anything)."""
    parent = sys.modules.get(full.rpartition(".")[0])
    if parent is None or not hasattr(parent, "__path__"):
        return False
    try:
        return importlib.util.find_spec(full) is not None
    except (ImportError, ValueError):
        return False


def installed(name: str) -> bool:
    """The top-level package of `name` can be imported here (found without importing it). A
    module that does not exist is the candidate's mistake (`import_error` when it runs), not a
    refused import."""
    root = name.split(".")[0]
    if root in sys.modules:
        return True
    try:
        return importlib.util.find_spec(root) is not None
    except (ImportError, ValueError):
        return True


def _loaded(name: str) -> dict | None:
    return policy.namespace(sys.modules.get(name))


def import_refusal(node: ast.Import | ast.ImportFrom, backend: str) -> list[str]:
    """Messages for the refused modules of one import statement ([] when all are allowed)."""
    out = []
    if isinstance(node, ast.Import):
        for a in node.names:
            if not installed(a.name):
                continue
            why = policy.refusal(a.name, (), 0, backend, _loaded, _has_submodule)
            if why:
                out.append(f"import {a.name}: {why}")
        return out
    module = node.module or ""
    names = [a.name for a in node.names]
    if not node.level and not installed(module):
        return out
    why = policy.refusal(module, names, node.level, backend, _loaded, _has_submodule)
    if not why and module not in sys.modules:  # not loaded here: what the names spell
        why = next(
            (_spelled(module, n, backend) for n in names if _spelled(module, n, backend)), ""
        )
    if why:
        out.append(f"from {'.' * node.level}{module} import {', '.join(names)}: {why}")
    return out


def _spelled(module: str, name: str, backend: str) -> str:
    full = f"{module}.{name}"
    family = policy.family(full)
    if family is not None and family is policy.family(module):
        return ""  # a name of an allowed module of that family (load_inline for CUDA)
    if name in _BY_NAME or (family is not None and not policy.allowed(full, backend)):
        return f"{full}: the module {name} is not allowed in a candidate"
    return ""


def path_refusal(path: Path, backend: str) -> str | None:
    """Why a resolved name path is refused (see the module docstring), or None."""
    root = path[0]
    allowed = policy.allowed(root, backend) or policy.package_step(root, backend)
    if not allowed and installed(root):  # a missing module fails at import (import_error)
        return f"{'.'.join(path)}: the module {root} is not allowed in a candidate"
    hidden = [p for p in path[1:] if p in _ALWAYS_BY_NAME]
    if hidden:
        return f"{'.'.join(path)}: the module {hidden[0]} is not allowed in a candidate"
    obj: object = sys.modules.get(root)
    for i in range(1, len(path)):
        spelled = ".".join(path[: i + 1])
        if isinstance(obj, ModuleType):
            value = vars(obj).get(path[i])
            if value is None:
                value = sys.modules.get(spelled)
            if isinstance(value, ModuleType):
                name = value.__name__
                if policy.family(name) and not policy.allowed(name, backend):
                    return f"{'.'.join(path)}: reaches the module {name}, which is not allowed"
                obj = value
                continue
            obj = value
            if value is not None:
                continue
        # not resolved here (an object, or a module the judge has not loaded): by spelling
        if path[i] in _BY_NAME or (policy.family(spelled) and not policy.allowed(spelled, backend)):
            return f"{'.'.join(path)}: the module {spelled} is not allowed in a candidate"
    return None
