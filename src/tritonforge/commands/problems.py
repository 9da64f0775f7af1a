"""`tritonforge problems list|show|scale|check`: browse the suites, scale KernelBench, and say
which problems cannot be judged here.

Covers: argument parsing and printing for listing problems (table or JSON), showing one
problem's reference source (and built-in solution), writing scaled KernelBench sources in
KernelBench layout with a JSON report, and checking each problem: one reason per problem that
cannot run here (judge/reference.why_not), then, for those that can, whether it is
degenerate (its reference output does not depend on its inputs, or on one of them: measured by
judge/degenerate.py; one line with the word `degenerate` and the measured reason; `--quick`
skips the measurement). Does not cover: loading or scaling themselves (tritonforge.problems,
problems.kernelbench, problems.scaling).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonforge.config.names import unknown_name
from tritonforge.plan import PlanError
from tritonforge.problems import load_suite, select
from tritonforge.types import Problem

ALL_SUITES = ("builtin", "kernelbench")
SIZE_CHOICES = ("cpu", "gpu", "original", "scaled")
# Each suite's own name for a requested size; None = that suite's default.
_SUITE_SIZE = {
    "builtin": {None: "cpu", "cpu": "cpu", "scaled": "cpu", "gpu": "gpu", "original": "gpu"},
    "kernelbench": {
        None: "original",
        "cpu": "cpu",
        "scaled": "scaled",
        "gpu": "gpu",
        "original": "original",
    },
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("problems", help="list, show and scale benchmark problems")
    sub = parser.add_subparsers(dest="problems_command", metavar="ACTION")

    p_list = sub.add_parser("list", help="list problems as a table (or JSON)")
    _add_common(p_list)
    p_list.add_argument("--level", type=int, help="only this level")
    p_list.add_argument("--name", help="name or id glob (case-insensitive; substring if no *?[)")
    p_list.add_argument("--category", help="only this category (matmul, conv, norm, ...)")
    p_list.add_argument("--json", action="store_true", help="one JSON array on stdout")
    p_list.set_defaults(func=run_list)

    p_show = sub.add_parser("show", help="print a problem's reference source")
    p_show.add_argument("id", help="problem id (e.g. kernelbench/L1/19_ReLU) or unique name")
    _add_common(p_show)
    p_show.add_argument("--solution", action="store_true", help="also print the solution")
    p_show.add_argument("--json", action="store_true", help="the Problem record as JSON")
    p_show.set_defaults(func=run_show)

    p_scale = sub.add_parser("scale", help="scale KernelBench problems to an element budget")
    p_scale.add_argument("--budget", type=int, help="element budget (default 2**18)")
    p_scale.add_argument("--factor", type=float, help="divide every size constant by this")
    p_scale.add_argument("--level", type=int, help="only this level")
    p_scale.add_argument("--name", help="name or id glob")
    p_scale.add_argument("--source", help="KernelBench folder, JSONL/parquet file, or hf[:NAME]")
    p_scale.add_argument(
        "--out", type=Path, help="write OUT/levelN/ID_Name.py and OUT/scale_report.json"
    )
    p_scale.add_argument("--workers", type=int, default=2, help="child processes (default 2)")
    p_scale.add_argument("--timeout", type=float, default=120.0, help="seconds per problem")
    p_scale.add_argument("--no-cache", action="store_true", help="do not reuse cached results")
    p_scale.add_argument("--json", action="store_true", help="print the report as JSON")
    p_scale.set_defaults(func=run_scale)

    p_check = sub.add_parser(
        "check", help="say which problems cannot be judged on this machine, and why"
    )
    _add_common(p_check)
    p_check.add_argument("--level", type=int, help="only this level")
    p_check.add_argument("--name", help="name or id glob")
    p_check.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default cpu)")
    p_check.add_argument(
        "--quick", action="store_true", help="only whether each can run (no reference runs)"
    )
    p_check.add_argument("--json", action="store_true", help="one JSON object per problem")
    p_check.set_defaults(func=run_check)

    parser.set_defaults(func=lambda args: _usage(parser))


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", choices=ALL_SUITES, help="one suite (default: every one available)")
    p.add_argument(
        "--size",
        choices=SIZE_CHOICES,
        help="size preset (default: builtin cpu, kernelbench original)",
    )
    p.add_argument("--source", help="KernelBench folder, JSONL/parquet file, or hf[:NAME]")


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


Filter = Callable[[list[Problem]], list[Problem]]


def _load(suite: str, size: str | None, source: str | None, level: int | None, keep: Filter):
    """One suite at `size`, filtered by `keep`; KernelBench is filtered before it is scaled."""
    target = _SUITE_SIZE[suite][size]
    if suite != "kernelbench":
        return keep(load_suite(suite, size=target))
    from tritonforge.problems.kernelbench import SIZES, scale_kernelbench

    levels = [level] if level is not None else None
    problems = keep(load_suite(suite, size="original", source=source, levels=levels))
    return scale_kernelbench(problems) if SIZES[target] == "scaled" else problems


def _load_many(args: argparse.Namespace, suites: tuple[str, ...], level: int | None, keep: Filter):
    """Problems of the asked suites; a suite that is unavailable is skipped when not asked for."""
    problems: list[Problem] = []
    for suite in suites:
        try:
            problems.extend(_load(suite, args.size, args.source, level, keep))
        except (KeyError, ValueError, OSError) as exc:
            if args.suite:
                print(f"tritonforge problems: cannot load suite {suite}: {exc}", file=sys.stderr)
                return None
            print(f"(skipping suite {suite}: {exc})", file=sys.stderr)
    return problems


def run_list(args: argparse.Namespace) -> int:
    suites = (args.suite,) if args.suite else ALL_SUITES

    def keep(ps: list[Problem]) -> list[Problem]:
        return select(ps, level=args.level, name=args.name, category=args.category)

    problems = _load_many(args, suites, args.level, keep)
    if problems is None:
        return 2
    if args.json:
        rows = [
            {
                "id": p.id,
                "suite": p.suite,
                "level": p.level,
                "category": p.category,
                "name": p.name,
                "size": p.size,
                "has_solution": p.solution_src is not None,
            }
            for p in problems
        ]
        print(json.dumps(rows))
        return 0
    width = max([len(p.id) for p in problems] + [2])
    cat = max([len(p.category) for p in problems] + [8])
    print(f"{'ID':<{width}}  LEVEL  {'CATEGORY':<{cat}}  {'SIZE':<8}  NAME")
    for p in problems:
        print(f"{p.id:<{width}}  {p.level:<5}  {p.category:<{cat}}  {p.size:<8}  {p.name}")
    print(f"{len(problems)} problem(s)")
    return 0


def _suites_for_id(pid: str, suite: str | None) -> tuple[str, ...]:
    if suite:
        return (suite,)
    prefix = pid.split("/", 1)[0]
    return (prefix,) if prefix in ALL_SUITES else ALL_SUITES


def run_show(args: argparse.Namespace) -> int:
    def keep(ps: list[Problem]) -> list[Problem]:
        exact = select(ps, ids=[args.id])
        return exact or [p for p in ps if p.id.endswith("/" + args.id)]

    level = re.match(r"^kernelbench/L(\d+)/", args.id)
    matches = _load_many(args, _suites_for_id(args.id, args.suite), level and int(level[1]), keep)
    if matches is None:
        return 2
    if not matches:
        pool = _load_many(args, _suites_for_id(args.id, args.suite), None, lambda ps: ps) or []
        raise PlanError(unknown_name("problem", args.id, sorted({q.name for q in pool})))
    if len(matches) > 1:
        shown = ", ".join(q.id for q in matches[:10])
        raise PlanError(f"{len(matches)} problems match {args.id!r}: {shown}; give the full id")
    p = matches[0]
    if args.json:
        print(p.model_dump_json())
        return 0
    print(f"# {p.id}  (suite {p.suite}, level {p.level}, category {p.category}, size {p.size})")
    if p.meta.get("scaled"):
        print(f"# scaled constants (old -> new): {p.meta['scaled']}")
    print(p.reference_src.rstrip("\n"))
    if args.solution:
        print(f"\n# ---- solution ({p.id}) ----")
        print(p.solution_src.rstrip("\n") if p.solution_src else "# (no solution for this problem)")
    return 0


def run_scale(args: argparse.Namespace) -> int:
    from tritonforge.problems.kernelbench import KernelBenchError, load_kernelbench_original
    from tritonforge.problems.scaling import (
        DEFAULT_ELEMENT_BUDGET,
        default_cache_dir,
        scale_problems,
    )

    budget = args.budget if args.budget or args.factor else DEFAULT_ELEMENT_BUDGET
    try:
        problems = load_kernelbench_original(args.source, [args.level] if args.level else None)
    except KernelBenchError as exc:
        print(f"tritonforge problems scale: {exc}", file=sys.stderr)
        return 2
    problems = select(problems, level=args.level, name=args.name)
    scaled, report = scale_problems(
        problems,
        budget,
        workers=args.workers,
        factor=args.factor,
        timeout=args.timeout,
        cache_dir=None if args.no_cache else default_cache_dir(),
    )
    failed = [r for r in report if not r.ok]
    summary: dict[str, Any] = {
        "budget": budget,
        "factor": args.factor,
        "total": len(report),
        "scaled": len(scaled),
        "unscalable": [{"id": r.problem_id, "reason": r.reason} for r in failed],
        "results": [r.model_dump(exclude={"new_src"}) for r in report],
    }
    if args.out:
        for p in scaled:
            path = args.out / f"level{p.level}" / f"{p.problem_id}_{p.name}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(p.reference_src)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scale_report.json").write_text(json.dumps(summary, indent=1))
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"scaled {len(scaled)}/{len(report)} problems to budget={budget} factor={args.factor}")
    for r in failed:
        print(f"  cannot scale {r.problem_id}: {r.reason}")
    if args.out:
        print(f"wrote {args.out}/levelN/*.py and {args.out / 'scale_report.json'}")
    return 0


def run_check(args: argparse.Namespace) -> int:
    from tritonforge.evaluation.judge.reference import why_not

    suites = (args.suite,) if args.suite else ALL_SUITES
    problems = _load_many(
        args, suites, args.level, lambda ps: select(ps, level=args.level, name=args.name)
    )
    if problems is None:
        return 2
    bad = degenerate = 0
    for p in problems:
        reason = why_not(p, args.device)
        found = None if reason is not None or args.quick else _degeneracy(p, args.device)
        if found is not None and found.error:
            reason = f"broken reference: {found.error}"
        bad += reason is not None
        flagged = found is not None and found.degenerate
        degenerate += flagged
        if args.json:
            row: dict[str, Any] = {"id": p.id, "runnable": reason is None, "reason": reason}
            if found is not None:
                row["degenerate"] = flagged
                row["constant_outputs"] = list(found.constant_outputs)
                row["unused_inputs"] = list(found.unused_inputs)
                row["degenerate_reason"] = found.reason or None
            print(json.dumps(row), flush=True)
        elif flagged:
            print(f"{p.id}: degenerate: {found.reason}", flush=True)
        else:
            print(f"{p.id}: {'ok' if reason is None else reason}", flush=True)
    if not args.json:
        measured = "" if args.quick else f"; {degenerate} degenerate"
        print(
            f"{len(problems) - bad}/{len(problems)} problem(s) can be judged on {args.device}"
            + measured
        )
    return 0


def _degeneracy(problem: Problem, device: str) -> Any:
    """The problem's measured degeneracy (degenerate.Degeneracy), its reference loaded here."""
    from tritonforge.evaluation.judge.degenerate import Degeneracy, degeneracy
    from tritonforge.evaluation.judge.reference import ReferenceError, ReferenceStore

    store = ReferenceStore(max_bytes=1 << 30)
    try:
        return degeneracy(store.reference(problem, device))
    except ReferenceError as exc:
        return Degeneracy(error=str(exc)[:300])
    finally:
        store.clear()
