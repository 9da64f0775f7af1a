"""`tritonforge eval-dir DIR`: evaluate a folder of candidates (one file per problem) in parallel.

File names map to problems: KernelBench run layout `level_L_problem_ID_sample_S_kernel.py`, or a
problem's name / slug (`relu.py`, `builtin__relu.py`, optionally `..._sample_S.py`). Writes
summary.json, summary.md, summary.png (in problem order) and verdicts.jsonl (as they finish) to
--out; candidates start in the order of evaluation/batch_order.py (memory-heavy problems kept
apart, light ones beside them; on the CPU, file order). Missing problems count as
failures in every rate. The suite, size, settings and the folder are checked before any work: an
unknown name or a folder where no file matches a problem is refused (exit 2, one line).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from tqdm import tqdm

from tritonforge.commands._eval_args import add_eval_args, reward_of, settings_from_args
from tritonforge.plan import PlanError
from tritonforge.plan.runs import EvalPlan
from tritonforge.types import Problem, Verdict

if TYPE_CHECKING:
    from tritonforge.evaluation.judge.evaluator import Evaluator

KB_RUN = re.compile(r"level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
SAMPLE = re.compile(r"^(.*?)(?:_sample_(\d+))?\.py$")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval-dir", help="evaluate a folder of candidates and summarise", description=__doc__
    )
    p.add_argument("directory", type=Path)
    p.add_argument("--suite", default="builtin", help="builtin | kernelbench")
    p.add_argument(
        "--size", default=None, help="size preset: cpu|gpu (builtin), original|scaled (kernelbench)"
    )
    p.add_argument("--source", default=None, help="kernelbench: dataset dir or JSONL/parquet file")
    p.add_argument("--level", type=int, default=None)
    p.add_argument("--workers", type=int, default=2, help="candidates evaluated at once")
    p.add_argument("--out", type=Path, default=None, help="output folder (default DIR/eval)")
    add_eval_args(p)
    p.set_defaults(func=run, config_fn=settings_from_args)


def load_problems(
    suite: str, size: str | None, source: str | None, level: int | None
) -> list[Problem]:
    """The suite's problems at `size` (PlanError for an unknown suite, size or source)."""
    from tritonforge.plan.problems import load_checked
    from tritonforge.problems import select

    kwargs: dict = {"source": source} if source else {}
    problems = select(load_checked(("--suite", "--size"), suite, size, **kwargs), level=level)
    if not problems:
        raise PlanError(f"--level {level}: suite {suite!r} has no problem at that level")
    return problems


def match_files(
    directory: Path, problems: list[Problem]
) -> tuple[list[tuple[Problem, Path]], list[Path]]:
    by_key: dict[str, Problem] = {}
    for p in problems:
        for key in (
            p.name.lower(),
            p.slug.lower(),
            p.id.lower(),
            f"{p.problem_id}_{p.name}".lower(),
        ):
            by_key[key] = p
    by_kb = {(p.level, p.problem_id): p for p in problems}
    pairs, unmatched = [], []
    for f in sorted(directory.glob("*.py")):
        m = KB_RUN.search(f.name)
        prob = by_kb.get((int(m.group(1)), int(m.group(2)))) if m else None
        if prob is None:
            stem = SAMPLE.match(f.name).group(1).lower()
            prob = by_key.get(stem)
        if prob is None:
            unmatched.append(f)
        else:
            pairs.append((prob, f))
    return pairs, unmatched


def resolve(
    args: argparse.Namespace,
) -> tuple[EvalPlan, list[Problem], list[tuple[Problem, Path]], list[Path]]:
    """Checked settings, the suite's problems, (problem, file) pairs and unmatched files."""
    from tritonforge.plan.runs import resolve_eval

    if not args.directory.is_dir():
        raise PlanError(f"{args.directory} is not a directory")
    if args.workers < 1:
        raise PlanError(f"--workers {args.workers}: must be at least 1")
    reward_of(args)  # an unknown --reward is refused before anything is judged
    plan = resolve_eval(settings_from_args(args))
    problems = load_problems(args.suite, args.size, args.source, args.level)
    pairs, unmatched = match_files(args.directory, problems)
    if not pairs:
        seen = ", ".join(f.name for f in unmatched[:3]) or "no .py files at all"
        raise PlanError(
            f"no file in {args.directory} matched a problem of suite {args.suite!r} "
            f"({len(unmatched)} .py file(s): {seen}); name files after a problem "
            f"(relu.py, builtin__relu.py, relu_sample_0.py) or in KernelBench's run layout "
            f"(level_1_problem_19_sample_0_kernel.py)"
        )
    return plan, problems, pairs, unmatched


def judge_pairs(
    ev: Evaluator, pairs: list[tuple[Problem, Path]], workers: int, log: TextIO
) -> list[Verdict]:
    """Each (problem, file) pair's verdict, in the order of `pairs`; started in the order of
    evaluation/batch_order.py (memory-heavy problems kept apart, light ones beside them), logged
    to `log` as they finish."""
    from tritonforge.evaluation.batch_order import run_jobs, shares_for
    from tritonforge.evaluation.judge.workerenv import device_label

    verdicts: list[Verdict | None] = [None] * len(pairs)
    bar = tqdm(total=len(pairs), desc="evaluating", unit="cand")

    def on_done(i: int, pair: tuple[Problem, Path], v: Verdict) -> None:
        prob, f = pair
        verdicts[i] = v
        log.write(json.dumps({"file": f.name, **v.model_dump(mode="json")}) + "\n")
        log.flush()
        bar.update(1)
        bar.set_postfix_str(f"{prob.name}: {v.status.value}")

    sources = [prob.reference_src for prob, _ in pairs]
    shares = shares_for(sources, ev.settings, device_label(ev.settings))
    run_jobs(
        lambda pair: ev.evaluate(pair[0], pair[1].read_text()), pairs, shares, workers, on_done
    )
    bar.close()
    assert all(v is not None for v in verdicts)  # run_jobs without a deadline finishes every job
    return verdicts  # type: ignore[return-value]


def run(args: argparse.Namespace) -> int:
    plan, problems, pairs, unmatched = resolve(args)
    settings = plan.settings
    for f in unmatched:
        print(f"warning: {f.name} matches no problem of suite {args.suite}", file=sys.stderr)
    out = args.out or args.directory / "eval"
    out.mkdir(parents=True, exist_ok=True)
    from tritonforge.evaluation.judge.evaluator import Evaluator
    from tritonforge.evaluation.judge.summary import plot, summarize, to_markdown

    with Evaluator(settings) as ev, open(out / "verdicts.jsonl", "w") as log_f:
        verdicts = judge_pairs(ev, pairs, args.workers, log_f)
        by_problem: dict[str, list[Verdict]] = {}
        rows: list[tuple[str, Verdict]] = []
        for (prob, _), v in zip(pairs, verdicts, strict=True):  # in file order, as matched
            by_problem.setdefault(prob.id, []).append(v)
            rows.append((prob.id, v))
        # written before the evaluator shuts down (fork servers, cached references), so a run
        # killed by an outer time limit after the last verdict still has its summary
        reward = reward_of(args)  # the task side's reward beside the judge's facts
        summary = summarize(by_problem, [p.id for p in problems], reward)
        summary["unmatched_files"] = [f.name for f in unmatched]
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        (out / "summary.md").write_text(to_markdown(summary, sorted(rows), reward))
        plot(summary, out / "summary.png")
    print(
        json.dumps(
            {
                k: summary[k]
                for k in (
                    "problems",
                    "correct",
                    "correctness_rate",
                    "fast_1",
                    "geomean_speedup",
                    "geomean_speedup_vs_compile",
                    "judge_faults",
                )
            }
        )
    )
    print(f"wrote {out}/summary.json, summary.md, summary.png, verdicts.jsonl", file=sys.stderr)
    return 0
