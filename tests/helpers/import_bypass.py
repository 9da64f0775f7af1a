"""Test-only rewrite of an attack's refused imports into lookups in `sys.modules`, reached as an
attribute of torch (`torch.sys.modules`): no import statement, so neither the static allowlist
nor the worker's import guard sees it, and the attack reaches the layer it was written against.

Covers: `bypass_imports(source)` and `structural_only`, the static check without its reward-hack
findings (monkeypatched into the evaluator by the runtime-only tests). Every `import m`, `import m as a` and
`from m import n as a` that the allowlist refuses becomes an assignment from the loaded module
(`from m import n` takes the attribute, or the loaded submodule `m.n`). Used by
tests/eval/test_attacks_runtime.py with the static rules off, never by the judge. Does not cover:
modules the worker has not loaded (the lookup fails: the case then fails its test).
"""

from __future__ import annotations

import ast

from tritonforge.evaluation.judge.checks import StaticResult, run_static
from tritonforge.evaluation.judge.import_rules import import_refusal
from tritonforge.types import Status

HEADER = (
    "import torch as _tf_torch\n"
    "_tf_modules = _tf_torch.sys.modules\n"
    "def _tf_from(module, name):\n"
    "    owner = _tf_modules[module]\n"
    "    return owner.__dict__[name] if name in owner.__dict__ else _tf_modules[module + '.' + name]\n"
)


def _replacement(node: ast.Import | ast.ImportFrom, indent: str) -> str:
    lines = []
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.asname:
                lines.append(f"{a.asname} = _tf_modules[{a.name!r}]")
            else:
                root = a.name.split(".")[0]
                lines.append(f"_tf_modules[{a.name!r}]; {root} = _tf_modules[{root!r}]")
    else:
        for a in node.names:
            lines.append(f"{a.asname or a.name} = _tf_from({node.module!r}, {a.name!r})")
    return "\n".join(indent + line for line in lines)


def bypass_imports(source: str) -> str:
    """`source` with its refused top-level imports rewritten (see the module docstring)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    refused = [
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom)) and import_refusal(n, "triton")
    ]
    for node in sorted(refused, key=lambda n: n.lineno, reverse=True):
        start, end = node.lineno - 1, (node.end_lineno or node.lineno)
        indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
        lines[start:end] = [_replacement(node, indent)]
    first = tree.body[0] if tree.body else None
    at = 0
    if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant):
        at = first.end_lineno or 0  # after the module docstring
    lines[at:at] = HEADER.rstrip("\n").splitlines()
    return "\n".join(lines) + "\n"


def structural_only(
    source: str | None, mode: str = "strict", backend: str = "triton", require: bool = False
) -> StaticResult:
    """The static result without its reward-hack findings (parse errors still count)."""
    result = run_static(source, mode, backend, require)
    if result.status is Status.REWARD_HACK:
        return StaticResult(None, None, "", result.findings, [])
    return result
