"""Static rule `python_in_kernel`: a @triton.jit body may only use Triton, not Python state.

Covers: finding the @triton.jit functions of a candidate (also under autotune/heuristics) and
reporting names in their bodies that refer to module-level Python objects a compiled Triton
kernel cannot use: modules other than triton, math and Inductor's kernel-side `triton_helpers`
(torch, numpy, os, ...), classes, plain Python functions (not @triton.jit), mutable or computed
globals (dicts, lists, tensors) and globals rebound at runtime (`global NAME` in any function),
plus the interpreter's internals (`.handle`, `.data`). On a GPU such a kernel fails to compile;
under the CPU interpreter the body is plain Python and could compute with numpy or PyTorch out of
the audit's sight, so it is a reward hack there. Plain-number globals, `tl.constexpr(...)`
globals and other jit functions are allowed. Does not cover: anything at runtime (the launch
recorder refuses Python functions and modules passed as kernel arguments, and audit.py flags
PyTorch ops under a launch).
"""

from __future__ import annotations

import ast

from tritonforge.evaluation.judge.inductor_rules import KERNEL_HELPERS

ALLOWED_MODULE_ROOTS = {"triton", "math"}
INTERPRETER_INTERNALS = {"handle", "data"}  # a tl.tensor's interpreter storage (numpy arrays)


def name_chain(node: ast.AST) -> tuple[str, ...]:
    """('torch', 'ops', 'aten') for torch.ops.aten; () when not a plain name chain."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return tuple(reversed(parts))
    return ()


def is_jit(fn: ast.AST) -> bool:
    if not isinstance(fn, ast.FunctionDef):
        return False
    for d in fn.decorator_list:
        c = name_chain(d.func if isinstance(d, ast.Call) else d)
        if c and c[-1] == "jit" and ("triton" in c or len(c) == 1):
            return True
    return False


def _constant(node: ast.AST, modules: dict[str, tuple[str, ...]]) -> bool:
    """A value a compiled kernel could see as a constant."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return _constant(node.operand, modules)
    if isinstance(node, ast.BinOp):
        return _constant(node.left, modules) and _constant(node.right, modules)
    if isinstance(node, ast.Tuple):
        return all(_constant(e, modules) for e in node.elts)
    c = name_chain(node.func if isinstance(node, ast.Call) else node)
    if c and c[0] in modules:  # tl.constexpr(...), tl.float32, math.pi, math.sqrt(2)
        return modules[c[0]][0] in ALLOWED_MODULE_ROOTS and (
            not isinstance(node, ast.Call) or all(_constant(a, modules) for a in node.args)
        )
    return False


def _module_bindings(tree: ast.Module) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """(module aliases, other top-level names -> 'function' | 'jit' | 'class' | 'const' | 'state')."""
    modules: dict[str, tuple[str, ...]] = {}
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                modules[a.asname or a.name.split(".")[0]] = tuple(a.name.split("."))
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                modules[a.asname or a.name] = (*node.module.split("."), a.name)
    rebound = {n for f in ast.walk(tree) if isinstance(f, ast.Global) for n in f.names}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names[node.name] = "jit" if is_jit(node) else "function"
        elif isinstance(node, ast.ClassDef):
            names[node.name] = "class"
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            kind = "const" if _constant(node.value, modules) else "state"
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names[n.id] = kind
    for n in rebound:  # a global some function assigns: whatever it holds when the kernel runs
        if names.get(n) != "jit":
            names[n] = "state"
    return modules, names


def _locals(fn: ast.FunctionDef) -> set[str]:
    out = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.Lambda)) and node is not fn:
            if isinstance(node, ast.FunctionDef):
                out.add(node.name)
            out |= {a.arg for a in node.args.args}
    return out


def python_in_kernel(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, message) for each non-Triton name used inside a @triton.jit body."""
    modules, names = _module_bindings(tree)
    found: list[tuple[int, str]] = []
    for fn in ast.walk(tree):
        if not is_jit(fn):
            continue
        local = _locals(fn)
        body = [n for stmt in fn.body for n in ast.walk(stmt)]  # not the decorators
        for node in body:
            if isinstance(node, ast.Attribute) and node.attr in INTERPRETER_INTERNALS:
                found.append(
                    (
                        node.lineno,
                        f"kernel {fn.name} reads .{node.attr}: the interpreter's internals are "
                        "not part of Triton",
                    )
                )
                continue
            if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load):
                continue
            if node.id in local:
                continue
            why = None
            if (
                node.id in modules
                and modules[node.id][0] not in ALLOWED_MODULE_ROOTS
                and modules[node.id][: len(KERNEL_HELPERS)] != KERNEL_HELPERS
            ):
                why = f"module {'.'.join(modules[node.id])}"
            elif names.get(node.id) in ("class", "state"):
                why = f"Python object {node.id!r}"
            elif names.get(node.id) == "function":
                why = f"plain Python function {node.id!r} (not @triton.jit)"
            if why:
                found.append(
                    (
                        node.lineno,
                        f"kernel {fn.name} uses {why}: a Triton kernel body may only use "
                        "triton.language, its arguments and constants",
                    )
                )
    return found
