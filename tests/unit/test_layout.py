"""The layout: the trust boundary, and the layers of src/ in its import graph.

Covers: evaluation/sandbox/ is exactly the package code loaded in the candidate's process (fork
server and worker), and nothing of the judge or the service is (run, not parsed); and the static
import graph of src/tritonforge (every `import` and `from ... import`, at module level, in
functions and under TYPE_CHECKING, parsed, not run) has
- no circle of modules;
- no import from a lower layer into a higher one. The layers, lowest first (LAYERS):
  foundation (types, config, logging, hardware, retry, model_cast) < problems < evaluation <
  rollout < training < plan < jobs < scale < commands < cli. training/ is the trainer library:
  it imports the foundation only (not problems, evaluation or rollout); inside evaluation/,
  sandbox < judge < the rest (api, batch_order, service);
- inside judge/, the Evaluator on top: no other judge module imports evaluator.py (the phases get
  what they use of it as one tools.JudgeTools), and the record modules (requests, replies,
  verdicts) import no judge module.
A registry's lazy entry ("module:attr" or "module", config.registry) is a name, not an import:
it may name a higher layer's module (the loss registry in config names training.losses), and
tests/unit/test_registry.py resolves every such entry, so none can go stale.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import tritonforge
import tritonforge.evaluation.sandbox as sandbox_pkg

# what the fork server imports before forking, plus what a worker imports lazily (device sharing)
PROBE = """
import json, sys
from tritonforge.evaluation.sandbox import zygote, audit, worker, isolation, devshare
print(json.dumps(sorted(m for m in sys.modules if m.startswith("tritonforge"))))
"""

OUTSIDE_ALLOWED = {"tritonforge", "tritonforge.types", "tritonforge.evaluation"}


def _loaded_in_worker() -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=300
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_sandbox_folder_is_exactly_the_candidate_side():
    loaded = _loaded_in_worker()
    folder = Path(sandbox_pkg.__file__).parent
    expected = {f"tritonforge.evaluation.sandbox.{p.stem}" for p in folder.glob("*.py")}
    expected = {m.removesuffix(".__init__") for m in expected}
    sandbox_loaded = {m for m in loaded if m.startswith("tritonforge.evaluation.sandbox")}
    assert sandbox_loaded == expected  # every module of the folder runs there
    others = loaded - sandbox_loaded
    assert others <= OUTSIDE_ALLOWED, f"judge/service code in the candidate's process: {others}"


# ----------------------------------------------------------------------------------- the layers
SRC = Path(tritonforge.__file__).parent
FOUNDATION = ("types", "config", "logging_setup", "hardware", "retry", "model_cast")
LAYERS: list[tuple[str, tuple[str, ...]]] = [  # lowest first; module-name prefixes
    ("foundation", ("tritonforge", *(f"tritonforge.{m}" for m in FOUNDATION))),
    ("problems", ("tritonforge.problems",)),
    ("evaluation", ("tritonforge.evaluation",)),
    ("rollout", ("tritonforge.rollout",)),
    ("training", ("tritonforge.training",)),
    ("plan", ("tritonforge.plan",)),
    ("jobs", ("tritonforge.jobs",)),
    ("scale", ("tritonforge.scale",)),
    ("commands", ("tritonforge.commands",)),
    ("cli", ("tritonforge.cli", "tritonforge.__main__")),
]
ONLY_FROM = {"training": {"foundation", "training"}}  # layers a layer may import, if narrower
EVALUATION_LAYERS = [  # inside evaluation/, lowest first (the rest of evaluation/ is on top)
    ("sandbox", ("tritonforge.evaluation.sandbox",)),
    ("judge", ("tritonforge.evaluation.judge",)),
    ("rest", ("tritonforge.evaluation",)),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The package modules `path` imports anywhere in it (`from a import b`: a.b if a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.update(
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            )
    out = set()
    for target in found:  # the longest prefix that is a module of the package
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (static; see the module docstring)."""
    paths = {_module_name(p): p for p in SRC.rglob("*.py")}
    return {name: _imports(path, name, set(paths)) for name, path in paths.items()}


def _layer(module: str, layers: list[tuple[str, tuple[str, ...]]]) -> tuple[int, str]:
    best = max(
        ((len(prefix), i) for i, (_, prefixes) in enumerate(layers) for prefix in prefixes
         if module == prefix or (module.startswith(prefix + ".") and prefix != "tritonforge")),
        default=None,
    )  # fmt: skip
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[1], layers[best[1]][0]


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_import_graph_is_read_from_every_module() -> None:
    graph = import_graph()
    assert len(graph) > 150 and "tritonforge.jobs.loop" in graph
    assert "tritonforge.jobs.assemble" in graph["tritonforge.jobs.loop"]
    assert "tritonforge.problems.sizing" in graph["tritonforge.problems.scale_worker"]
    assert "tritonforge.rollout.runner" in graph["tritonforge.jobs.sft_data"]  # in a function
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles() -> None:
    circles = _circles(import_graph())
    assert not circles, f"import circles: {circles}"


def _violations(
    layers: list[tuple[str, tuple[str, ...]]],
    within: str = "",
    graph: dict[str, set[str]] | None = None,
) -> list[str]:
    out = []
    for module, targets in sorted((graph or import_graph()).items()):
        if not module.startswith(within):
            continue
        level, name = _layer(module, layers)
        for target in sorted(t for t in targets if t.startswith(within)):
            t_level, t_name = _layer(target, layers)
            allowed = ONLY_FROM.get(name) if not within else None
            if t_level > level or (allowed is not None and t_name not in allowed):
                out.append(f"{module} ({name}) imports {target} ({t_name})")
    return out


def test_no_import_from_a_lower_layer_to_a_higher_one() -> None:
    assert not _violations(LAYERS), "\n".join(_violations(LAYERS))


def test_inside_evaluation_sandbox_is_below_judge_below_the_service() -> None:
    found = _violations(EVALUATION_LAYERS, within="tritonforge.evaluation")
    assert not found, "\n".join(found)


def test_a_higher_or_a_forbidden_import_would_be_caught() -> None:
    graph = {
        "tritonforge.training.rl": {"tritonforge.rollout.buffer", "tritonforge.config.train"},
        "tritonforge.problems.sizing": {"tritonforge.evaluation.judge.evaluator"},
        "tritonforge.jobs.loop": {"tritonforge.plan.runs", "tritonforge.training.rl"},
        "tritonforge.config": {"tritonforge.config.registry"},
    }
    assert _violations(LAYERS, graph=graph) == [
        "tritonforge.problems.sizing (problems) imports tritonforge.evaluation.judge.evaluator "
        "(evaluation)",
        "tritonforge.training.rl (training) imports tritonforge.rollout.buffer (rollout)",
    ]
    inside = {"tritonforge.evaluation.sandbox.worker": {"tritonforge.evaluation.judge.rng"}}
    assert _violations(EVALUATION_LAYERS, "tritonforge.evaluation", inside) == [
        "tritonforge.evaluation.sandbox.worker (sandbox) imports tritonforge.evaluation.judge.rng "
        "(judge)"
    ]


# ------------------------------------------------------------------------- inside judge/
JUDGE = "tritonforge.evaluation.judge"
# the judge's records: requests, parsed replies and the phases' results depend on no judge module
JUDGE_RECORDS = ("requests", "replies", "verdicts")


def _judge_boundaries(graph: dict[str, set[str]]) -> list[str]:
    """The Evaluator is the top of judge/: no other judge module imports it (the phases get what
    they use of it as one tools.JudgeTools record); the record modules import no judge module."""
    out = []
    for module, targets in sorted(graph.items()):
        if not module.startswith(JUDGE + "."):
            continue
        inside = sorted(t for t in targets if t.startswith(JUDGE + "."))
        if f"{JUDGE}.evaluator" in inside and module != f"{JUDGE}.evaluator":
            out.append(f"{module} imports the Evaluator")
        if module.rpartition(".")[2] in JUDGE_RECORDS and inside:
            out.append(f"{module} (records) imports {', '.join(inside)}")
    return out


def test_the_judges_phases_never_see_the_evaluator() -> None:
    graph = import_graph()
    assert {f"{JUDGE}.{m}" for m in ("phases", "trials", "recheck", "tools")} <= set(graph)
    assert f"{JUDGE}.tools" in graph[f"{JUDGE}.gpu_timing"]  # what they use instead
    found = _judge_boundaries(graph)
    assert not found, "\n".join(found)


def test_a_phase_reaching_the_evaluator_would_be_caught() -> None:
    graph = {
        f"{JUDGE}.gpu_timing": {f"{JUDGE}.evaluator", f"{JUDGE}.tools"},
        f"{JUDGE}.evaluator": {f"{JUDGE}.phases"},
        f"{JUDGE}.verdicts": {f"{JUDGE}.notes", "tritonforge.types"},
        f"{JUDGE}.requests": {"tritonforge.evaluation.sandbox.recipe_format"},
    }
    assert _judge_boundaries(graph) == [
        f"{JUDGE}.gpu_timing imports the Evaluator",
        f"{JUDGE}.verdicts (records) imports {JUDGE}.notes",
    ]
