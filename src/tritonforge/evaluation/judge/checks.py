"""Static checks of a candidate's source, one function per rule, each with the reason it exists.

Covers: no code, syntax errors, a missing `ModelNew`, and the source-level reward-hack rules
(no custom kernel in strict mode, generated code, dispatcher escapes, dynamic code and
introspection that could reach the audit's state, forbidden imports, patching the evaluator's
functions, probing the RNG seed, exiting the process, probing the profiler, Python inside a
kernel body via kernel_checks.py). Static rules are the cheap first layer; the audit in the
sandbox (audit.py) catches what source tricks hide. Rule names and meanings: docs/security.md.
Does not cover: running anything. (Over 400 lines because the rule tables list one name per
line; the logic is the visitor below.)
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Callable
from dataclasses import dataclass

from tritonforge.evaluation.judge import inductor_rules
from tritonforge.evaluation.judge.kernel_checks import name_chain as _chain
from tritonforge.evaluation.judge.kernel_checks import python_in_kernel
from tritonforge.evaluation.judge.own_settings import jit_noop, own_setting, seed_read
from tritonforge.evaluation.judge.resolve import Resolver
from tritonforge.evaluation.sandbox.forbidden import FORBIDDEN_MODULES
from tritonforge.types import Status


@dataclass
class Finding:
    rule: str
    line: int
    message: str


@dataclass
class StaticResult:
    status: Status | None  # None: passed
    rule: str | None = None
    message: str = ""
    findings: list[Finding] | None = None
    preimports: list[str] | None = None  # Inductor runtime modules the worker imports first


INTROSPECTION_ATTRS = {
    "__globals__",
    "__closure__",
    "__code__",
    "cell_contents",
    "f_back",
    "f_globals",
    "f_locals",
    "f_code",
    "gi_frame",
    "cr_frame",
    "tb_frame",
    "tb_next",
    "__subclasses__",
    "__wrapped__",
    "__builtins__",
    "__dict__",
    "__getattribute__",
    "_getframe",
    "_current_frames",
    "__reduce__",
    "__reduce_ex__",
    "__self__",
    "__func__",
    "__mro__",
    "__bases__",
    "__setattr__",
    "__delattr__",
}
# host views of tensor memory without a torch call (numpy's and CUDA's array interfaces)
HOST_VIEW_NAMES = {"__array_interface__", "__array_struct__", "__cuda_array_interface__"}
# forbidden modules that other modules expose as attributes (logging.threading, queue.threading)
REACHABLE_FORBIDDEN = {
    "threading",
    "_thread",
    "concurrent",
    "multiprocessing",
    "subprocess",
    "socket",
    "ctypes",
    "gc",
    "importlib",
    "builtins",
    "pickle",
    "marshal",
    "pydoc",
    "pkgutil",
    "runpy",
    "mmap",
    "weakref",
    "tritonforge",
}
VALUE_ONLY_CALLS = {"getattr", "setattr", "delattr"}  # passing these around hides the name
DYNAMIC_CALLS = {"exec", "eval", "compile", "__import__", "globals", "locals", "vars", "breakpoint"}
GENERATED = {
    ("torch", "compile"),
    ("torch", "jit"),
    ("torch", "_dynamo"),
    ("torch", "_inductor"),
    ("torch", "fx"),
    ("torch", "export"),
}
ESCAPES = {
    ("torch", "ops"),
    ("torch", "_C"),
    ("torch", "_ops"),
    ("torch", "library"),
    ("torch", "_prims"),
    ("torch", "_refs"),
    ("torch", "_decomp"),
    ("torch", "utils", "_python_dispatch"),
}
# Reading a global RNG's state or seed is `seed_probe`; setting it, and the process-local
# performance/numerics flags, are allowed (own_settings.py; docs/security.md says why).
SEED_ADVICE = (
    "reading the global RNG's seed or state is not allowed (the judge seeds it before building "
    "ModelNew, exactly as it does for the reference, and draws the inputs elsewhere from hidden "
    "seeds); setting it is fine (torch.manual_seed(N)), and so is a private generator: "
    "g = torch.Generator().manual_seed(N); torch.randn(..., generator=g)"
)
PROCESS_EXIT = {
    ("os", "_exit"),
    ("os", "abort"),
    ("sys", "exit"),
    ("os", "kill"),
    ("os", "killpg"),
    ("os", "system"),
    ("os", "popen"),
    ("os", "fork"),
    ("os", "execv"),
    ("os", "execve"),
    ("os", "setsid"),
}
PROTECTED_ROOTS = {
    "torch",
    "time",
    "triton",
    "tl",
    "os",
    "sys",
    "np",
    "numpy",
    "math",
    "F",
    "nn",
    "random",
}

# Rules that apply in hybrid mode too (security and judge integrity); the rest are strict-only.
ALWAYS = {
    "forbidden_import",
    "introspection",
    "dynamic_code",
    "judge_tamper",
    "seed_probe",
    "process_control",
    "generated_code",
    "dispatcher_escape",
    "profiler_tamper",
    "python_in_kernel",
}
# String constants naming interpreter internals (e.g. for operator.attrgetter): introspection.
INTROSPECTION_STRINGS = INTROSPECTION_ATTRS | {"__import__", "f_builtins", "gi_code"}


class _Visitor(ast.NodeVisitor):
    def __init__(self, resolver: Resolver):
        self.findings: list[Finding] = []
        self.resolver = resolver
        self.aliases = resolver.aliases  # name -> module path (imports and local aliases)
        self.inner: set[int] = set()  # ids of Attribute nodes that are prefixes of a longer chain
        self.called: set[int] = set()  # ids of Name nodes that are the function of a call
        self.helper_inner: set[int] = set()  # prefixes of an allowed Inductor runtime path
        self.helper_paths: list[tuple[str, ...]] = []  # allowed Inductor runtime paths used
        self.noop_inner: set[int] = set()  # prefixes of a TorchScript no-op (torch.jit.ignore)

    def add(self, rule: str, node: ast.AST, msg: str) -> None:
        self.findings.append(Finding(rule, getattr(node, "lineno", 0), msg))

    def resolved(self, node: ast.AST) -> tuple[str, ...]:
        return self.resolver.path(node) or _chain(node)

    def _check_path(self, node: ast.AST, path: tuple[str, ...], whole: bool) -> None:
        """Rules on what a name resolves to; `whole`: the path is a complete chain (not the
        prefix of a longer one), so prefix rules apply."""
        for prefix in () if jit_noop(path) else GENERATED:
            if path[: len(prefix)] == prefix and (whole or len(path) == len(prefix)):
                self.add(
                    "generated_code",
                    node,
                    f"{'.'.join(path)}: generated code (torch.compile/jit/fx) is not a custom kernel",
                )
        for prefix in ESCAPES:
            if path[: len(prefix)] == prefix and (whole or len(path) == len(prefix)):
                self.add(
                    "dispatcher_escape",
                    node,
                    f"{'.'.join(path)}: private dispatcher APIs are not allowed",
                )
        if seed_read(path):
            self.add("seed_probe", node, f"{'.'.join(path)}: {SEED_ADVICE}")
        if any(path[i : i + 2] == ("sys", "modules") for i in range(len(path) - 1)):
            self.add(
                "introspection", node, "sys.modules: reaching other modules' state is not allowed"
            )
        if path[:2] in PROCESS_EXIT:
            self.add(
                "process_control", node, f"{'.'.join(path[:2])}: process control is not allowed"
            )
        hidden = [p for p in path[1:] if p in REACHABLE_FORBIDDEN]
        if hidden or path[0] in FORBIDDEN_MODULES - {"types", "code", "signal"}:
            what = hidden[0] if hidden else path[0]
            self.add(
                "forbidden_import",
                node,
                f"{'.'.join(path)}: the module {what} is not allowed in a candidate",
            )
        if whole:
            self._profiler(node, path)

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            root = a.name.split(".")[0]
            if root in FORBIDDEN_MODULES:
                self.add(
                    "forbidden_import", node, f"import of {a.name} is not allowed in a candidate"
                )
            self._module_path(node, tuple(a.name.split(".")))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        if node.level or mod.split(".")[0] in FORBIDDEN_MODULES:
            self.add(
                "forbidden_import",
                node,
                f"import from {'.' * node.level}{mod} is not allowed in a candidate",
            )
        for a in node.names:
            self._module_path(node, (*mod.split("."), a.name))

    def _module_path(self, node: ast.AST, path: tuple[str, ...]) -> None:
        if inductor_rules.allowed(path):  # KernelBook-style runtime helpers (inductor_rules.py)
            self.helper_paths.append(path)
            return
        if seed_read(path):
            self.add("seed_probe", node, f"importing {'.'.join(path)}: {SEED_ADVICE}")
        for prefix in () if jit_noop(path) else GENERATED:
            if path[: len(prefix)] == prefix:
                self.add(
                    "generated_code",
                    node,
                    f"{'.'.join(path)}: generated code (torch.compile/jit/fx) is not a custom kernel",
                )
        for prefix in ESCAPES:
            if path[: len(prefix)] == prefix:
                self.add(
                    "dispatcher_escape",
                    node,
                    f"{'.'.join(path)}: private dispatcher APIs are not allowed",
                )
        if path[:2] in PROCESS_EXIT:
            self.add("process_control", node, f"{'.'.join(path)}: process control is not allowed")
        self._profiler(node, path)
        if path[-1] in ("Model", "reference") or (
            len(path) > 1 and path[0] in ("reference", "model", "problem")
        ):
            self.add(
                "reference_reuse",
                node,
                f"importing {'.'.join(path)}: the reference must not be reused",
            )

    def _profiler(self, node: ast.AST, path: tuple[str, ...]) -> None:
        if (
            path[:1] == ("torch",)
            and any("profiler" in p.lower() for p in path[1:])
            and path[-1] != "record_function"
        ):
            self.add(
                "profiler_tamper",
                node,
                f"{'.'.join(path)}: the evaluator's profiler must not be probed or controlled",
            )

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and node.value in INTROSPECTION_STRINGS:
            self.add(
                "introspection",
                node,
                f"the string {node.value!r} names interpreter internals, which are not allowed",
            )
        if isinstance(node.value, str) and node.value in HOST_VIEW_NAMES:
            self.add("host_read", node, f"{node.value!r}: a host view of tensor memory")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "__builtins__":
            self.add("introspection", node, "__builtins__ is not accessible to candidates")
        if node.id in VALUE_ONLY_CALLS and id(node) not in self.called:
            self.add("dynamic_code", node, f"{node.id} used as a value hides the attribute name")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in INTROSPECTION_ATTRS:
            self.add(
                "introspection",
                node,
                f".{node.attr}: introspection of interpreter internals is not allowed",
            )
        if node.attr in HOST_VIEW_NAMES:
            self.add("host_read", node, f".{node.attr}: a host view of tensor memory")
        path = self.resolver.path(node)
        if id(node) in self.noop_inner or jit_noop(path):  # torch.jit.ignore and its prefix
            self.noop_inner.add(id(node.value))
            self.inner.add(id(node.value))
            self.generic_visit(node)
            return
        if id(node) in self.helper_inner or (path and inductor_rules.allowed(path)):
            self.helper_paths.append(path)
            self.helper_inner.add(id(node.value))
            self.inner.add(id(node.value))
            self.generic_visit(node)
            return
        through = inductor_rules.outside(path) if path and id(node) not in self.inner else None
        if through:
            self.add(
                through,
                node,
                f"{'.'.join(path)}: only the Inductor runtime helpers may be used, not what "
                "their modules import (the compiler is not a custom kernel)",
            )
        if path:
            self._check_path(node, path, id(node) not in self.inner)
        self.inner.add(id(node.value))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name):
            self.called.add(id(node.func))
        path = self.resolver.call_path(node)
        if path and not inductor_rules.allowed(path):  # getattr(X, "name"), pydoc.locate("a.b")
            self._check_path(node, path, True)
        if self.resolver.by_name_call(node):
            self.add("dynamic_code", node, "a computed name looked up at runtime is not allowed")
        if isinstance(node.func, ast.Name):
            name = node.func.id
            if name in DYNAMIC_CALLS:
                self.add("dynamic_code", node, f"{name}(): dynamic code is not allowed")
            if name in ("getattr", "setattr", "delattr", "hasattr") and (
                len(node.args) < 2 or not isinstance(node.args[1], ast.Constant)
            ):
                self.add(
                    "dynamic_code", node, f"{name}() with a computed attribute name is not allowed"
                )
            if (
                name in ("setattr", "delattr")
                and node.args
                and self.resolved(node.args[0])[:1]
                and self.resolved(node.args[0])[0] in PROTECTED_ROOTS
                and not (name == "setattr" and own_setting(self._set_path(node)))
            ):
                self.add(
                    "judge_tamper", node, f"{name}() on a library module or class is not allowed"
                )
            if (
                name == "getattr"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and str(node.args[1].value) in INTROSPECTION_ATTRS
            ):
                self.add(
                    "introspection", node, f"getattr(..., {node.args[1].value!r}) is not allowed"
                )
        self.generic_visit(node)

    def _set_path(self, node: ast.Call) -> tuple[str, ...]:
        """The attribute `setattr(X, "name", v)` sets, when the name is a constant."""
        name = node.args[1] if len(node.args) > 1 else None
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            return (*self.resolved(node.args[0]), name.value)
        return ()

    def _check_target(self, target: ast.AST, setting: bool = False) -> None:
        """Assignment targets: library attributes are `judge_tamper`, except (with `setting`,
        a plain assignment) the process-local flags of own_settings.py."""
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._check_target(t, setting)
            return
        if isinstance(target, ast.Starred):
            self._check_target(target.value, setting)
            return
        if isinstance(target, ast.Attribute):
            path = self.resolver.path(target) or _chain(target)
            if setting and own_setting(path):
                return
            if path and (path[0] in PROTECTED_ROOTS or self.resolver.path(target.value)):
                self.add(
                    "judge_tamper",
                    target,
                    f"assigning {'.'.join(path)}: patching library functions is not allowed",
                )
        if isinstance(target, ast.Name) and target.id in ("__builtins__",):
            self.add("introspection", target, "rebinding __builtins__ is not allowed")

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._check_target(t, setting=True)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node.target, setting=node.value is not None)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target, setting=True)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self._check_target(node.target)  # `for torch.allclose in ...` rebinds it too
        self.generic_visit(node)

    visit_AsyncFor = visit_For

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            if item.optional_vars is not None:
                self._check_target(item.optional_vars)
        self.generic_visit(node)

    visit_AsyncWith = visit_With


def _has_kernel(tree: ast.Module, backend: str) -> bool:
    for node in ast.walk(tree):
        if backend == "triton" and isinstance(node, (ast.FunctionDef,)):
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                c = _chain(target)
                if (
                    c
                    and c[-1] in ("jit", "autotune", "heuristics")
                    and ("triton" in c or len(c) == 1)
                ):
                    return True
        if (
            backend == "cuda"
            and isinstance(node, ast.Call)
            and _chain(node.func)[-1:] in (("load_inline",), ("load",))
        ):
            return True
    return False


def _model_new(tree: ast.Module) -> ast.AST | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            return node
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "ModelNew" for t in node.targets
        ):
            return node
    return None


def _reference_reuse(tree: ast.Module, model_new: ast.AST) -> Finding | None:
    """ModelNew subclassing, aliasing or instantiating the reference class `Model`."""
    if isinstance(model_new, ast.ClassDef):
        for b in model_new.bases:
            if _chain(b)[-1:] == ("Model",):
                return Finding(
                    "reference_reuse", model_new.lineno, "ModelNew subclasses the reference Model"
                )
        for node in ast.walk(model_new):
            if isinstance(node, ast.Call) and _chain(node.func)[-1:] == ("Model",):
                return Finding(
                    "reference_reuse", node.lineno, "ModelNew instantiates the reference Model"
                )
    elif isinstance(model_new, ast.Assign):
        return Finding(
            "reference_reuse", model_new.lineno, "ModelNew is an alias, not a new implementation"
        )
    return None


Rule = Callable[[ast.Module], list[Finding]]
# ast.parse from several judge threads at once raised "SystemError: AST constructor recursion
# depth mismatch" (CPython 3.11's AST conversion keeps its depth in shared state)
_PARSE_LOCK = threading.Lock()


def run_static(
    source: str | None, mode: str = "strict", backend: str = "triton", require_kernel: bool = False
) -> StaticResult:
    """Apply all static rules; the first fatal finding decides the result. `require_kernel`:
    no_custom_kernel applies in hybrid mode too (the tritonforge preset). A source nested deeper
    than the parser or the rules recurse (`1+1+...+1` a thousand times) is a syntax error, not a
    judge failure."""
    try:
        return _run_static(source, mode, backend, require_kernel)
    except RecursionError:
        return StaticResult(
            Status.SYNTAX_ERROR, None, "the source nests expressions deeper than the judge parses"
        )


def _run_static(source: str | None, mode: str, backend: str, require_kernel: bool) -> StaticResult:
    if source is None or not source.strip():
        return StaticResult(Status.NO_CODE, None, "the response contained no code")
    try:
        with _PARSE_LOCK:
            tree = ast.parse(source)
    except SyntaxError as exc:
        where = f"line {exc.lineno}, column {exc.offset}" if exc.lineno else "unknown position"
        text = (exc.text or "").rstrip()
        return StaticResult(
            Status.SYNTAX_ERROR, None, f"SyntaxError at {where}: {exc.msg}\n    {text}"
        )
    model_new = _model_new(tree)
    if model_new is None:
        return StaticResult(
            Status.MISSING_MODEL_NEW,
            None,
            "the code defines no `ModelNew` (a class ModelNew(nn.Module) with the same interface as Model)",
        )
    v = _Visitor(Resolver(tree))
    v.visit(tree)
    findings = list(v.findings)
    if backend == "triton":
        findings += [Finding("python_in_kernel", ln, m) for ln, m in python_in_kernel(tree)]
    if mode == "strict":
        reuse = _reference_reuse(tree, model_new)
        if reuse:
            findings.append(reuse)
    if (mode == "strict" or require_kernel) and not _has_kernel(tree, backend):
        what = "@triton.jit kernel" if backend == "triton" else "CUDA extension (load_inline)"
        findings.append(
            Finding(
                "no_custom_kernel",
                1,
                f"no {what} is defined: {mode} mode requires the computation in custom kernels",
            )
        )
    always = ALWAYS | ({"no_custom_kernel"} if require_kernel else set())
    fatal = [f for f in findings if mode == "strict" or f.rule in always]
    if fatal:
        f = fatal[0]
        return StaticResult(Status.REWARD_HACK, f.rule, f"line {f.line}: {f.message}", findings)
    return StaticResult(None, None, "", findings, inductor_rules.preimports(v.helper_paths))
