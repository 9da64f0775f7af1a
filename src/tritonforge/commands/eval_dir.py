"""`tritonforge eval-dir DIR`: evaluate a folder of candidates (one file per problem) in parallel.

File names map to problems: KernelBench run layout `level_L_problem_ID_sample_S_kernel.py`, or a
problem's name / slug (`relu.py`, `builtin__relu.py`, optionally `..._sample_S.py`). Writes
summary.json, summary.md, summary.png and verdicts.jsonl to --out. Missing problems count as
failures in every rate.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from tqdm import tqdm

from tritonforge.commands._eval_args import add_eval_args, settings_from_args
from tritonforge.types import Problem, Verdict

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
    p.set_defaults(func=run)


def load_problems(
    suite: str, size: str | None, source: str | None, level: int | None
) -> list[Problem]:
    from tritonforge.problems import load_suite, select

    kwargs: dict = {}
    if size:
        kwargs["size"] = size
    if source:
        kwargs["source"] = source
    return select(load_suite(suite, **kwargs), level=level)


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


def run(args: argparse.Namespace) -> int:
    if not args.directory.is_dir():
        print(f"tritonforge eval-dir: {args.directory} is not a directory", file=sys.stderr)
        return 2
    settings = settings_from_args(args)
    problems = load_problems(args.suite, args.size, args.source, args.level)
    pairs, unmatched = match_files(args.directory, problems)
    for f in unmatched:
        print(f"warning: {f.name} matches no problem of suite {args.suite}", file=sys.stderr)
    out = args.out or args.directory / "eval"
    out.mkdir(parents=True, exist_ok=True)
    from tritonforge.evaluation.judge.evaluator import Evaluator
    from tritonforge.evaluation.judge.summary import plot, summarize, to_markdown

    by_problem: dict[str, list[Verdict]] = {}
    rows: list[tuple[str, Verdict]] = []
    with (
        Evaluator(settings) as ev,
        open(out / "verdicts.jsonl", "w") as log_f,
        ThreadPoolExecutor(max(1, args.workers)) as pool,
    ):
        futures = {pool.submit(ev.evaluate, prob, f.read_text()): (prob, f) for prob, f in pairs}
        bar = tqdm(as_completed(futures), total=len(futures), desc="evaluating", unit="cand")
        for fut in bar:
            prob, f = futures[fut]
            v = fut.result()
            by_problem.setdefault(prob.id, []).append(v)
            rows.append((prob.id, v))
            log_f.write(json.dumps({"file": f.name, **v.model_dump(mode="json")}) + "\n")
            log_f.flush()
            bar.set_postfix_str(f"{prob.name}: {v.status.value}")
        # written before the evaluator shuts down (fork servers, cached references): a time-boxed
        # run that finished judging keeps its summary (lost once on the H200 at the 240-s box)
        summary = summarize(by_problem, [p.id for p in problems])
        summary["unmatched_files"] = [f.name for f in unmatched]
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        (out / "summary.md").write_text(to_markdown(summary, sorted(rows)))
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
