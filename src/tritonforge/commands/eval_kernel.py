"""`tritonforge eval-kernel REF.py CANDIDATE.py`: judge one candidate file against one reference.

Stable contract (scripts depend on it): with `--json` the last stdout line is one JSON object with
at least status, compiled, correct, speedup, reward, message; exit code 0 whenever a verdict was
produced (also for failing candidates), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tritonforge.commands._eval_args import add_eval_args, settings_from_args
from tritonforge.types import Problem


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval-kernel", help="evaluate one candidate against one reference", description=__doc__
    )
    p.add_argument(
        "reference",
        type=Path,
        help="KernelBench-format reference (Model, get_inputs, get_init_inputs)",
    )
    p.add_argument("candidate", type=Path, help="candidate file defining ModelNew")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the verdict as one JSON line (last line of stdout)",
    )
    add_eval_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for path in (args.reference, args.candidate):
        if not path.is_file():
            print(f"tritonforge eval-kernel: {path} is not a file", file=sys.stderr)
            return 2
    settings = settings_from_args(args)
    from tritonforge.evaluation.judge.evaluator import Evaluator

    problem = Problem(
        id=f"file/{args.reference.stem}",
        suite="file",
        name=args.reference.stem,
        reference_src=args.reference.read_text(),
    )
    with Evaluator(settings) as ev:
        verdict = ev.evaluate(problem, args.candidate.read_text())
    if args.json:
        payload = verdict.model_dump(mode="json")
        print(json.dumps(payload, separators=(",", ":")))
    else:
        print(verdict.short())
        if verdict.message:
            print(verdict.message)
        for note in verdict.notes:
            print(f"note: {note}")
    return 0
