"""The candidate's Triton kernels alone, as a module the trusted replayer can import.

Covers: `kernel_module(source)`: from the candidate's source (never run here), the top-level
`@triton.jit` functions (their `@triton.autotune` / `@triton.heuristics` decorators dropped: the
replay launches the configuration the recipe names), the imports of Triton, `math` and
Inductor's kernel-side `triton_helpers` that they use, and the module-level constants they read
(literals, arithmetic, `tl.constexpr(...)`: the expressions kernel_checks.py calls constants),
written out as a new module source. Nothing else of the candidate reaches the replayer.

Every kernel body is checked first (`KernelRefused` with the reason): under the CPU interpreter a
kernel body runs as plain Python in the replayer, a trusted process, so a body may use only its
parameters and locals, the other kernels, those constants, a few builtins (`SAFE_BUILTINS`), and
attribute chains of `triton.language`, `math` and `triton_helpers` that resolve (here, in the
judge) to Triton builtins, jit functions, dtypes or numbers; no attribute starting with `_`, no
interpreter internals (`.handle`, `.data`), no lambda, nested function, `global`, import,
comprehension or `with`. A compiled kernel on a GPU could not do more; the check makes the
interpreter's case as narrow. The replayer also imports the module with restricted builtins
(sandbox/replay_model.py).
Does not cover: what the recipe launches (judge/replay.py), running anything.
"""

from __future__ import annotations

import ast
import functools
import importlib
import types
from dataclasses import dataclass
from typing import Any

from tritonforge.evaluation.judge.checks import _PARSE_LOCK
from tritonforge.evaluation.judge.inductor_rules import KERNEL_HELPERS
from tritonforge.evaluation.judge.kernel_checks import (
    INTERPRETER_INTERNALS,
    _module_bindings,
    is_jit,
    name_chain,
)
from tritonforge.evaluation.sandbox.replay_model import SAFE_BUILTINS

# modules a kernel module may import, and what attribute chains in a body may pass through
MODULE_ROOTS = (("triton",), ("math",), KERNEL_HELPERS)
_BODY_MODULES = ("triton.language", "math", ".".join(KERNEL_HELPERS))
_ALLOWED_NODES = (
    ast.arguments, ast.arg, ast.Return, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For,
    ast.While, ast.If, ast.Expr, ast.Pass, ast.Break, ast.Continue, ast.Assert, ast.BinOp,
    ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Call, ast.Attribute, ast.Subscript, ast.Slice,
    ast.Name, ast.Constant, ast.Tuple, ast.List, ast.IfExp, ast.keyword, ast.Starred,
    ast.Load, ast.Store, ast.Del, ast.operator,
    ast.unaryop, ast.boolop, ast.cmpop, ast.expr_context,
)  # fmt: skip
_JIT_KWARGS = {"do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline"}


class KernelRefused(Exception):
    """The source's kernels cannot be replayed alone (the message says why)."""


@dataclass(frozen=True)
class KernelModule:
    """The module the replayer imports, and each kernel's parameters: (name, constexpr)."""

    source: str
    names: list[str]
    params: dict[str, tuple[tuple[str, bool], ...]]


def kernel_module(source: str) -> KernelModule:
    """The module of the candidate's top-level @triton.jit functions (see the docstring)."""
    try:
        with _PARSE_LOCK:
            tree = ast.parse(source)
    except (SyntaxError, RecursionError, ValueError) as exc:
        raise KernelRefused(f"the source does not parse: {exc}") from None
    _, names = _module_bindings(tree)
    kernels = [n for n in tree.body if isinstance(n, ast.FunctionDef) and is_jit(n)]
    jit_names = {k.name for k in kernels}
    imports = _imports(tree)
    guarded = _guarded_imports(tree)
    counts = _binding_counts(tree, guarded)
    for name in jit_names:
        if counts.get(name, 0) != 1:
            raise KernelRefused(f"kernel {name} is bound more than once in the module")
    consts = _constants(tree, names, imports, kernels)
    bound = set(imports) | jit_names | {n for node in consts for n in _targets(node)}
    once = {n for n in bound if counts.get(n, 0) == 1}
    for k in kernels:
        _check_body(k, once, imports, jit_names)
    plain = _imports(ast.Module(body=[n for n in tree.body if not isinstance(n, ast.Try)]))
    lines = ["import triton", "import triton.language as tl"]
    lines += [ast.unparse(plain[a][0]) for a in sorted(plain)]
    lines += [ast.unparse(t) for t in guarded]
    lines += [ast.unparse(c) for c in consts]
    for k in kernels:
        lines += ["", "", ast.unparse(_plain_jit(k))]
    params = {k.name: _params(k) for k in kernels}
    return KernelModule("\n".join(lines) + "\n", sorted(jit_names), params)


def _params(fn: ast.FunctionDef) -> tuple[tuple[str, bool], ...]:
    """The kernel's parameters in order, each with whether it is a `tl.constexpr`."""
    args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    out = []
    for a in args:
        chain = name_chain(a.annotation) if a.annotation is not None else ()
        is_constexpr = bool(chain) and chain[-1] == "constexpr"
        if isinstance(a.annotation, ast.Constant) and isinstance(a.annotation.value, str):
            is_constexpr = a.annotation.value.split(".")[-1] == "constexpr"
        out.append((a.arg, is_constexpr))
    return tuple(out)


def _binding_counts(tree: ast.Module, guarded: list[ast.Try]) -> dict[str, int]:
    """How many times each name is bound at module level, anywhere outside function and class
    bodies (nested blocks, augmented assignments, walrus, for/with/except targets, imports,
    `del`, def/class names); a name some function declares `global` counts as bound many times.
    A guarded import block (`_guarded_imports`) binds its names once."""
    counts: dict[str, int] = {}

    def add(name: str, n: int = 1) -> None:
        counts[name] = counts.get(name, 0) + n

    def visit(stmts: list[ast.stmt]) -> None:
        for st in stmts:
            if any(st is g for g in guarded):
                for alias in {a.asname or a.name.split(".")[0] for i in st.body
                              for a in getattr(i, "names", [])}:  # fmt: skip
                    add(alias)
                continue
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                add(st.name)
                continue
            if isinstance(st, (ast.Import, ast.ImportFrom)):
                for a in st.names:
                    add(a.asname or a.name.split(".")[0])
                continue
            for node in ast.walk(st):
                if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                    add(node.id)
                elif isinstance(node, ast.ExceptHandler) and node.name:
                    add(node.name)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    add(node.name)
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    for a in node.names:
                        add(a.asname or a.name.split(".")[0])

    visit(tree.body)
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            for name in node.names:
                add(name, 2)
    return counts


_HANDLERS = {"ImportError", "ModuleNotFoundError", "AttributeError"}
# Triton's host helpers a constant may call: arithmetic on integers only
_PURE_HOST = {(("triton",), ("cdiv",)), (("triton",), ("next_power_of_2",))}


def _guarded_imports(tree: ast.Module) -> list[ast.Try]:
    """Top-level `try: import A except ImportError: import B` blocks made of allowed imports
    only (libdevice's place moved between Triton versions): kept whole."""
    out = []
    for node in tree.body:
        if not isinstance(node, ast.Try) or node.finalbody:
            continue
        stmts = node.body + node.orelse + [s for h in node.handlers for s in h.body]
        types_ok = all(
            h.type is not None
            and all(isinstance(n, ast.Name) and n.id in _HANDLERS for n in _names_of(h.type))
            and h.name is None
            for h in node.handlers
        )
        if (
            types_ok
            and stmts
            and all(_allowed_import(st) or isinstance(st, ast.Pass) for st in stmts)
        ):
            out.append(node)
    return out


def _names_of(node: ast.expr) -> list[ast.expr]:
    return list(node.elts) if isinstance(node, ast.Tuple) else [node]


def _allowed_import(st: ast.stmt) -> bool:
    if isinstance(st, ast.Import):
        return all(_allowed_module(tuple(a.name.split("."))) for a in st.names)
    if isinstance(st, ast.ImportFrom) and st.module and not st.level:
        return all(
            a.name != "*" and _allowed_module((*st.module.split("."), a.name)) for a in st.names
        )
    return False


def _imports(tree: ast.Module) -> dict[str, tuple[ast.stmt, tuple[str, ...]]]:
    """Alias -> (an import statement binding only it, the module path it names); the imports
    of guarded blocks (`_guarded_imports`) are named here too, their first binding, and are
    emitted with their block."""
    out: dict[str, tuple[ast.stmt, tuple[str, ...]]] = {}
    guarded = [st for t in _guarded_imports(tree) for st in t.body]
    for node in [*tree.body, *guarded]:
        if isinstance(node, ast.Import):
            for a in node.names:
                path = tuple(a.name.split("."))
                if _allowed_module(path) and a.asname:
                    out[a.asname] = (ast.Import(names=[a]), path)
                elif _allowed_module(path):
                    out[path[0]] = (ast.Import(names=[ast.alias(path[0])]), path[:1])
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                path = (*node.module.split("."), a.name)
                if a.name != "*" and _allowed_module(path):
                    stmt = ast.ImportFrom(module=node.module, names=[a], level=0)
                    out[a.asname or a.name] = (stmt, path)
    return out


def _allowed_module(path: tuple[str, ...]) -> bool:
    return any(path[: len(root)] == root for root in MODULE_ROOTS)


def _targets(node: ast.stmt) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[attr-defined]
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _constants(
    tree: ast.Module,
    names: dict[str, str],
    imports: dict[str, tuple[ast.stmt, tuple[str, ...]]],
    kernels: list[ast.FunctionDef],
) -> list[ast.stmt]:
    """The module-level constant assignments the kernels read, in source order."""
    used = {
        n.id
        for k in kernels
        for stmt in k.body
        for n in ast.walk(stmt)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }
    out = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = _targets(node)
            if (
                targets
                and set(targets) & used
                and all(names.get(t) == "const" for t in targets)
                and _const_expr(node.value, imports)
            ):
                out.append(node)
    return out


def _const_expr(node: ast.AST, imports: dict[str, tuple[ast.stmt, tuple[str, ...]]]) -> bool:
    """Literals, arithmetic and tuples of them, Triton/math names that resolve to numbers or
    dtypes, and calls of `tl.constexpr` or a `math` function on such values: nothing else runs
    when the replayer imports the module."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return _const_expr(node.operand, imports)
    if isinstance(node, ast.BinOp):
        return _const_expr(node.left, imports) and _const_expr(node.right, imports)
    if isinstance(node, ast.Tuple):
        return all(_const_expr(e, imports) for e in node.elts)
    if isinstance(node, ast.Call):
        if node.keywords or not all(_const_expr(a, imports) for a in node.args):
            return False
        chain = name_chain(node.func)
        if chain and chain[0] in imports and (imports[chain[0]][1], chain[1:]) in _PURE_HOST:
            return True  # triton.cdiv(...), triton.next_power_of_2(...) of constants
        fn = _named(node.func, imports)
        return fn is not None and (fn is _constexpr_type() or _math_function(fn))
    obj = _named(node, imports)
    if obj is None:
        return False
    return isinstance(obj, (int, float, bool)) or type(obj).__name__ in ("dtype", "constexpr")


def _named(node: ast.AST, imports: dict[str, tuple[ast.stmt, tuple[str, ...]]]) -> Any:
    """The object an imported module's attribute chain names, or None."""
    chain = name_chain(node)
    if not chain or chain[0] not in imports or any(a.startswith("_") for a in chain):
        return None
    try:
        return _resolve("(constant)", imports[chain[0]][1], chain[1:])
    except KernelRefused:
        return None


def _constexpr_type() -> Any:
    import triton.language as tl

    return tl.constexpr


def _math_function(fn: Any) -> bool:
    return callable(fn) and getattr(fn, "__module__", None) == "math"


def _plain_jit(fn: ast.FunctionDef) -> ast.FunctionDef:
    """The function with `@triton.jit` (literal options kept) as its only decorator."""
    keywords = []
    for d in fn.decorator_list:
        c = name_chain(d.func if isinstance(d, ast.Call) else d)
        if isinstance(d, ast.Call) and c and c[-1] == "jit":
            keywords = [k for k in d.keywords if k.arg in _JIT_KWARGS and _literal(k.value)]
    jit: ast.expr = ast.Attribute(ast.Name("triton", ast.Load()), "jit", ast.Load())
    if keywords:
        jit = ast.Call(func=jit, args=[], keywords=keywords)
    new = ast.FunctionDef(
        name=fn.name, args=fn.args, body=fn.body, decorator_list=[jit], returns=None,
        type_comment=None, lineno=fn.lineno, type_params=[],
    )  # fmt: skip
    return ast.fix_missing_locations(new)


def _scalar_literal(node: ast.AST) -> bool:
    """A literal number, string, bool, None, or a tuple of them (immutable: no state)."""
    if isinstance(node, ast.Tuple):
        return all(_scalar_literal(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _scalar_literal(node.operand)
    return isinstance(node, ast.Constant) and type(node.value) in (
        int,
        float,
        bool,
        str,
        type(None),
    )


@functools.lru_cache(maxsize=1)
def _value_members() -> frozenset[str]:
    """Public members of the values a kernel body holds: Triton tensors, constexprs, dtypes."""
    import triton.language as tl

    kinds = [tl.tensor, tl.constexpr, tl.dtype, tl.pointer_type, tl.block_type]
    names = {n for k in kinds for n in dir(k) if not n.startswith("_")}
    return frozenset(names - INTERPRETER_INTERNALS)


def _literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except ValueError:
        return False


def _check_body(
    fn: ast.FunctionDef,
    bound: set[str],
    imports: dict[str, tuple[ast.stmt, tuple[str, ...]]],
    jits: set[str],
) -> None:
    """KernelRefused unless every node of the kernel is one a Triton kernel may use."""
    local = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}
    if fn.args.vararg or fn.args.kwarg:
        raise KernelRefused(f"kernel {fn.name} takes *args or **kwargs")
    for default in fn.args.defaults + [d for d in fn.args.kw_defaults if d is not None]:
        if not _scalar_literal(default):
            raise KernelRefused(f"kernel {fn.name} has a default that is not a literal scalar")
    nodes = [n for stmt in fn.body for n in ast.walk(stmt)]
    nodes += [n for a in fn.args.args + fn.args.kwonlyargs for n in ast.walk(a)]
    local |= {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    for node in nodes:
        if not isinstance(node, _ALLOWED_NODES):
            raise KernelRefused(
                f"kernel {fn.name} uses {type(node).__name__} (line {getattr(node, 'lineno', '?')}),"
                " which a replayed kernel may not"
            )
        if isinstance(node, (ast.Attribute, ast.Subscript)) and not isinstance(node.ctx, ast.Load):
            raise KernelRefused(f"kernel {fn.name} assigns to an attribute or an item (line "
                                f"{node.lineno}): a kernel keeps no Python state")  # fmt: skip
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("_") or node.attr in INTERPRETER_INTERNALS:
                raise KernelRefused(f"kernel {fn.name} reads the attribute .{node.attr}")
            chain = name_chain(node)
            if chain and chain[0] in imports and chain[0] not in local:
                _resolve(fn.name, imports[chain[0]][1], chain[1:])
            elif node.attr not in _value_members():
                raise KernelRefused(
                    f"kernel {fn.name} reads .{node.attr} of a value: only the members of "
                    "Triton's tensors, constexprs and dtypes"
                )
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in local or node.id in bound or node.id in SAFE_BUILTINS:
                continue
            raise KernelRefused(
                f"kernel {fn.name} uses the name {node.id!r}, which is neither its own, "
                "another kernel, a constant nor triton.language"
            )


def _resolve(kernel: str, path: tuple[str, ...], attrs: tuple[str, ...]) -> Any:
    """The object an attribute chain of an imported module names; KernelRefused unless every
    module on the way is under triton.language, math or triton_helpers and the end is one a
    kernel may use."""
    try:
        obj: Any = importlib.import_module(".".join(path))
    except ImportError:
        try:
            obj = getattr(importlib.import_module(".".join(path[:-1])), path[-1])
        except (ImportError, AttributeError) as exc:
            raise KernelRefused(
                f"kernel {kernel}: {'.'.join(path)} does not import: {exc}"
            ) from None
    where = ".".join(path)
    for attr in attrs:
        if isinstance(obj, types.ModuleType) and not _body_module(obj):
            if obj.__name__ != "triton" or attr != "language":
                raise KernelRefused(f"kernel {kernel} uses {where}.{attr}: outside triton.language")
        try:
            obj = getattr(obj, attr)
        except AttributeError:
            raise KernelRefused(
                f"kernel {kernel} uses {where}.{attr}, which does not exist"
            ) from None
        where += f".{attr}"
    if _usable(obj):
        return obj
    raise KernelRefused(
        f"kernel {kernel} uses {where} ({type(obj).__name__}), not a Triton builtin"
    )


def _body_module(mod: types.ModuleType) -> bool:
    return any(mod.__name__ == m or mod.__name__.startswith(m + ".") for m in _BODY_MODULES)


def _usable(obj: Any) -> bool:
    if isinstance(obj, types.ModuleType):
        return _body_module(obj)
    if isinstance(obj, (int, float, bool, str)) or obj is None:
        return True
    if getattr(obj, "__triton_builtin__", False):
        return True
    mod = getattr(type(obj), "__module__", "") or ""
    kind = type(obj).__name__
    if mod.startswith("triton") and kind in ("JITFunction", "InterpretedFunction", "constexpr"):
        return True
    if mod.startswith("triton.language") and kind in ("dtype", "pointer_type", "block_type"):
        return True
    if isinstance(obj, type) and (obj.__module__ or "").startswith("triton.language"):
        return True  # tl.constexpr, tl.tensor ... (annotations, isinstance)
    if isinstance(obj, types.FunctionType) and obj.__module__.startswith("triton.language"):
        return True  # libdevice's dispatch stubs and the like: Triton's own code
    # math.sqrt and the like (on constants)
    return callable(obj) and getattr(obj, "__module__", None) == "math"
