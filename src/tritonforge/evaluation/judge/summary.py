"""Summaries over many verdicts: correctness rate, fast_p, geometric-mean speedup, fault histogram.

Covers: `summarize` (per-problem best verdict, missing problems counted as failures), markdown
rendering and a plot. Shared by `eval-dir` and `bench-model`. Does not cover: producing verdicts.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from tritonforge.types import Status, Verdict

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)


def best(verdicts: list[Verdict]) -> Verdict:
    """The most successful of several samples: correct first, then reward, then speedup."""
    return max(verdicts, key=lambda v: (v.status is Status.CORRECT, v.reward, v.speedup or 0.0))


def summarize(by_problem: dict[str, list[Verdict]], all_problems: list[str]) -> dict[str, Any]:
    """Metrics over `all_problems`; a problem with no verdict counts as a failure."""
    n = len(all_problems)
    chosen = {pid: best(vs) for pid, vs in by_problem.items() if vs}
    correct = [v for v in chosen.values() if v.status is Status.CORRECT]
    timed = [v.speedup for v in correct if v.speedup is not None]
    fast = {}
    for p in FAST_P:
        hits = sum(1 for v in correct if v.speedup is not None and v.speedup > p)
        fast[f"fast_{p:g}"] = hits / n if n and timed else None
    hist = Counter(v.status.value for vs in by_problem.values() for v in vs)
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
        "geomean_speedup": math.exp(sum(math.log(s) for s in timed) / len(timed))
        if timed
        else None,
        "mean_reward": sum(v.reward for v in chosen.values()) / n if n else 0.0,
        "fault_histogram": dict(hist.most_common()),
        "hack_rules": dict(rules.most_common()),
        "missing": missing,
        "timed": bool(timed),
    }


def to_markdown(summary: dict[str, Any], rows: list[tuple[str, Verdict]] | None = None) -> str:
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
        "geomean_speedup",
        "mean_reward",
    ):
        lines.append(f"| {key} | {fmt(summary.get(key))} |")
    lines += ["", "| status | count |", "|---|---|"] + [
        f"| {k} | {v} |" for k, v in summary["fault_histogram"].items()
    ]
    if not summary.get("timed"):
        lines += [
            "",
            "fast_p and speedups are n/a: nothing was timed (the CPU interpreter checks correctness only).",
        ]
    if rows:
        lines += ["", "| problem | status | speedup | reward |", "|---|---|---|---|"]
        lines += [
            f"| {pid} | {v.status.value}{' (' + v.rule + ')' if v.rule else ''} | {fmt(v.speedup)} | {v.reward:.3f} |"
            for pid, v in rows
        ]
    return "\n".join(lines) + "\n"


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
