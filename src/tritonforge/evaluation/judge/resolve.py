"""What a name in the candidate's source resolves to, so static rules match objects, not spellings.

Covers: `Resolver`, which turns an expression into the dotted path of the module attribute it
names, through import aliases (`import torch as t`, `from torch import autograd as a`), local
aliases assigned anywhere in the file (`T = torch.Tensor`, `p = torch.autograd`, resolved to a
fixpoint), `getattr(X, "name")` with a constant name, `operator.attrgetter("a.b")(X)`,
import-by-name helpers with a constant string (`pydoc.locate`, `pkgutil.resolve_name`,
`importlib.import_module`, `__import__`) and `sys.modules["name"]`. Unresolvable expressions give
an empty path. Flow-insensitive on purpose: a name that is ever an alias of a module attribute
is treated as one everywhere.
Does not cover: the rules applied to the paths (checks.py), computed names (the runtime audit).
"""

from __future__ import annotations

import ast

from tritonforge.evaluation.judge.kernel_checks import name_chain

Path = tuple[str, ...]
# call targets (by their last two path parts) that import or look up a module by a string
_BY_NAME = {("pydoc", "locate"), ("pkgutil", "resolve_name"), ("importlib", "import_module")}


def import_aliases(tree: ast.Module) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = (
                    tuple(a.name.split(".")) if a.asname else (a.name.split(".")[0],)
                )
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                out[a.asname or a.name] = (*node.module.split("."), a.name)
    return out


def _const_str(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


class Resolver:
    """Dotted paths of expressions (see the module docstring)."""

    def __init__(self, tree: ast.Module):
        self.aliases: dict[str, Path] = import_aliases(tree)
        self.imported = set(self.aliases)
        assigns = [
            (t.id, n.value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Name)
        ]
        for _ in range(8):  # aliases of aliases, to a fixpoint
            changed = False
            for name, value in assigns:
                path = self.path(value)
                if path and self.aliases.get(name) != path and name not in self.imported:
                    self.aliases[name] = path
                    changed = True
            if not changed:
                break

    def path(self, node: ast.AST) -> Path:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, ())
        if isinstance(node, ast.Attribute):
            base = self.path(node.value)
            return (*base, node.attr) if base else ()
        if isinstance(node, ast.Subscript):
            key = _const_str(node.slice)
            if key and self.path(node.value)[-2:] == ("sys", "modules"):
                return tuple(key.split("."))
            return ()
        if isinstance(node, ast.Call):
            return self.call_path(node)
        return ()

    def call_path(self, node: ast.Call) -> Path:
        """The path a call returns: getattr with a constant name, attrgetter(...)(X), lookups by
        name; () for anything else."""
        func, args = node.func, node.args
        if isinstance(func, ast.Name) and func.id == "getattr" and len(args) >= 2:
            name, base = _const_str(args[1]), self.path(args[0])
            return (*base, *name.split(".")) if name and base else ()
        if isinstance(func, ast.Name) and func.id == "__import__" and args:
            name = _const_str(args[0])
            return tuple(name.split(".")[:1]) if name else ()
        if isinstance(func, ast.Call) and args:  # operator.attrgetter("a.b")(X)
            inner = self.target(func)
            name = _const_str(func.args[0]) if func.args else None
            base = self.path(args[0])
            if inner[-1:] == ("attrgetter",) and name and base:
                return (*base, *name.split("."))
            return ()
        target = self.target(node)
        if target[-2:] in _BY_NAME and args:
            name = _const_str(args[0])
            return tuple(name.replace(":", ".").split(".")) if name else ()
        return ()

    def target(self, node: ast.Call) -> Path:
        """The path of the function a call calls (resolved, or its plain spelling)."""
        return self.path(node.func) or name_chain(node.func)

    def by_name_call(self, node: ast.Call) -> bool:
        """A lookup-by-name helper called with a computed string."""
        t = self.target(node)
        computed = not node.args or _const_str(node.args[0]) is None
        return computed and (t[-2:] in _BY_NAME or t[-1:] == ("attrgetter",))
