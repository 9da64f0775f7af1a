"""`tritonforge eval-kernel REF.py CANDIDATE.py`: judge one candidate file against one reference.

Stable contract (scripts depend on it): with `--json` the last stdout line is one JSON object with
at least status, compiled, correct, speedup, reward, message; exit code 0 whenever a verdict was
produced (also for failing candidates). A request that cannot be served (a missing file, an
unknown reward, `--device cuda` on a machine without a GPU, a bad setting) is refused before any
work with exit code 2 and one line on stderr (with `--json` also one JSON object
{"error": ...} on stdout). On the CPU the reference's size is estimated first and a warning says when the Triton
interpreter would need minutes; the phase in progress is shown on stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from tritonforge.commands._eval_args import add_eval_args, reward_of, settings_from_args
from tritonforge.config.eval import EvalSettings
from tritonforge.logging_setup import get_logger
from tritonforge.plan import PlanError
from tritonforge.plan.runs import EvalPlan
from tritonforge.types import Problem

log = get_logger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval-kernel",
        help="evaluate one candidate against one reference",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    p.add_argument(
        "--quiet", action="store_true", help="no size warning or phase progress on stderr"
    )
    add_eval_args(p)
    p.set_defaults(func=run, config_fn=settings_from_args)


def resolve(args: argparse.Namespace) -> tuple[EvalPlan, Problem, str]:
    """The checked settings, the problem and the candidate source; PlanError if unservable."""
    from tritonforge.plan.runs import resolve_eval

    reward_of(args)  # an unknown --reward is refused before anything is judged
    for what, path in (("reference", args.reference), ("candidate", args.candidate)):
        if not path.is_file():
            raise PlanError(f"{what} {path} is not a file")
    plan = resolve_eval(settings_from_args(args))
    problem = Problem(
        id=f"file/{args.reference.stem}",
        suite="file",
        name=args.reference.stem,
        reference_src=args.reference.read_text(),
    )
    return plan, problem, args.candidate.read_text()


def warn_size(plan: EvalPlan, problem: Problem, reference: Path) -> None:
    """On the CPU interpreter: estimate the reference's work and warn when it is large."""
    if plan.device != "cpu":
        return
    from tritonforge.problems.workload import cpu_warning, measure_workload

    try:
        work = measure_workload(problem.reference_src)
    except Exception as exc:  # the estimate is advice: a reference it cannot size runs anyway
        log.debug("no size estimate for %s: %s", reference, exc)
        return
    s: EvalSettings = plan.settings
    budgets = s.budgets.model_dump()
    warning = cpu_warning(work, s.correctness_trials, budgets, reference)
    if warning:
        print(warning, file=sys.stderr)


class _PhaseLine(logging.Handler):
    """Shows the judge's phase progress on stderr, with seconds since the start."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.t0 = time.monotonic()

    def emit(self, record: logging.LogRecord) -> None:
        elapsed = time.monotonic() - self.t0
        print(f"[{elapsed:6.1f} s] {record.getMessage()}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    plan, problem, source = resolve(args)
    if not args.quiet:
        warn_size(plan, problem, args.reference)
    from tritonforge.evaluation.judge.evaluator import Evaluator, progress

    handler, saved = _PhaseLine(), (progress.level, progress.propagate)
    if not args.quiet:
        progress.addHandler(handler)
        progress.setLevel(logging.DEBUG)
        progress.propagate = False
    try:
        with Evaluator(plan.settings) as ev:
            verdict = ev.evaluate(problem, source)
    finally:
        progress.removeHandler(handler)
        progress.setLevel(saved[0])
        progress.propagate = saved[1]
    reward = reward_of(args)(verdict)  # the task side's, beside the judge's facts
    if args.json:
        payload = {**verdict.model_dump(mode="json"), "reward": reward}
        print(json.dumps(payload, separators=(",", ":")))
    else:
        print(f"{verdict.short()} reward={reward:.3f}")
        if verdict.message:
            print(verdict.message)
        for note in verdict.notes:
            print(f"note: {note}")
    return 0
