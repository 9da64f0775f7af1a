"""Summaries over many verdicts: correctness rate, fast_p, geometric-mean speedup, fault histogram.

Covers: `summarize` (per-problem best verdict, missing problems counted as failures; speedups
over eager and over torch.compile where it was timed; the judge's own faults counted apart from
candidate statuses), markdown rendering and a plot. Shared by `eval-dir` and `bench-model`. The
mean reward and the reward column are the caller's reward function's (the task side's:
rollout/rewards.py; verdicts hold no reward). Does not cover: producing verdicts.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonforge.types import Status, Verdict

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
RewardOf = Callable[[Verdict], float]


def best(verdicts: list[Verdict], reward: RewardOf) -> Verdict:
    """The most successful of several samples: correct first, then reward, then speedup."""
    return max(verdicts, key=lambda v: (v.status is Status.CORRECT, reward(v), v.speedup or 0.0))


def summarize(
    by_problem: dict[str, list[Verdict]], all_problems: list[str], reward: RewardOf
) -> dict[str, Any]:
    """Metrics over `all_problems`; a problem with no verdict counts as a failure."""
    n = len(all_problems)
    chosen = {pid: best(vs, reward) for pid, vs in by_problem.items() if vs}
    correct = [v for v in chosen.values() if v.status is Status.CORRECT]
    timed = [v.speedup for v in correct if v.speedup is not None]
    timed_c = [v.speedup_vs_compile for v in correct if v.speedup_vs_compile is not None]
    fast = {}
    for p in FAST_P:
        hits = sum(1 for v in correct if v.speedup is not None and v.speedup > p)
        fast[f"fast_{p:g}"] = hits / n if n and timed else None
    fast["fast_1_vs_compile"] = sum(1 for s in timed_c if s > 1.0) / n if n and timed_c else None
    every = [v for vs in by_problem.values() for v in vs]
    judge = [v for v in every if v.status.is_judge_fault]
    hist = Counter(v.status.value for v in every if not v.status.is_judge_fault)
    missing = [pid for pid in all_problems if pid not in chosen]
    if missing:
        hist["missing"] = len(missing)
    rules = Counter(v.rule for vs in by_problem.values() for v in vs if v.rule)
    return {
        "problems": n,
        "evaluated": len(chosen),
        "samples": sum(len(vs) for vs in by_problem.values()),
        "correct": len(correct),
        "correctness_rate": len(correct) / n if n else 0.0,
        "compiled_rate": sum(1 for v in chosen.values() if v.compiled) / n if n else 0.0,
        **fast,
        "geomean_speedup": _geomean(timed),
        "geomean_speedup_vs_compile": _geomean(timed_c),
        "mean_reward": sum(reward(v) for v in chosen.values()) / n if n else 0.0,
        "fault_histogram": dict(hist.most_common()),
        # the judge's own failures (out of memory after a retry alone, timing process deaths):
        # not candidate statuses; those problems were not judged
        "judge_faults": {"count": len(judge), "problems": sorted({v.problem_id for v in judge})},
        "hack_rules": dict(rules.most_common()),
        "missing": missing,
        "timed": bool(timed),
    }


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def to_markdown(
    summary: dict[str, Any],
    rows: list[tuple[str, Verdict]] | None = None,
    reward: RewardOf | None = None,
) -> str:
    def fmt(x: Any) -> str:
        if x is None:
            return "n/a"
        return f"{x:.3f}" if isinstance(x, float) else str(x)

    lines = ["| metric | value |", "|---|---|"]
    for key in (
        "problems",
        "evaluated",
        "samples",
        "correct",
        "correctness_rate",
        "compiled_rate",
        *[f"fast_{p:g}" for p in FAST_P],
        "fast_1_vs_compile",
        "geomean_speedup",
        "geomean_speedup_vs_compile",
        "mean_reward",
    ):
        lines.append(f"| {key} | {fmt(summary.get(key))} |")
    jf = summary.get("judge_faults") or {}
    if jf.get("count"):
        lines.append(f"| judge_faults (not judged) | {jf['count']} |")
    lines += ["", "| status | count |", "|---|---|"] + [
        f"| {k} | {v} |" for k, v in summary["fault_histogram"].items()
    ]
    if not summary.get("timed"):
        lines += [
            "",
            "fast_p and speedups are n/a: nothing was timed (the CPU interpreter checks correctness only).",
        ]
    if rows:
        lines += [
            "",
            "| problem | status | speedup (95% interval) | vs torch.compile | reward |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {pid} | {v.status.value}{' (' + v.rule + ')' if v.rule else ''} | "
            f"{speedup_cell(v.speedup, v.speedup_ci)} | "
            f"{speedup_cell(v.speedup_vs_compile, v.speedup_vs_compile_ci)} | "
            f"{reward(v) if reward is not None else float('nan'):.3f} |"
            for pid, v in rows
        ]
    return "\n".join(lines) + "\n"


def speedup_cell(speedup: float | None, ci: list[float] | None) -> str:
    """'1.23 (1.18-1.29)', '1.23', or 'n/a'."""
    if speedup is None:
        return "n/a"
    return f"{speedup:.3f}" + (f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci else "")


def plot(summary: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    keys = [f"fast_{p:g}" for p in FAST_P]
    a.bar(keys, [summary.get(k) or 0.0 for k in keys], color="#4c72b0")
    a.set_ylim(0, 1)
    a.set_title(f"fast_p (correct: {summary['correctness_rate']:.0%})")
    a.tick_params(axis="x", rotation=30)
    hist = summary["fault_histogram"]
    b.barh(list(hist.keys()), list(hist.values()), color="#dd8452")
    b.set_title("verdicts")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
