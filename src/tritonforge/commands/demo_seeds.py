"""The demo over several seeds: one table of before/after with the spread.

Covers: `seed_table(results)` (per metric and problem set: before and after for each seed, the
mean, min and max of the change, and how many seeds improved) and `write_seed_table(run_dir,
results)` (RUN_DIR/seeds.json and a Markdown table RUN_DIR/seeds.md). Does not cover: running
the seeds (commands.demo).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["METRICS", "seed_table", "write_seed_table"]

METRICS = ("pass_rate", "mean_reward", "repair_rate")


def _sets(result: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """{set name: {"before": ..., "after": ...}} with the RL problems as "rl_problems"."""
    return {"rl_problems": {"before": result["before"], "after": result["after"]}, **result["sets"]}


def seed_table(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per set and metric: per-seed before/after and the change's mean, min, max, improved."""
    out: dict[str, Any] = {"seeds": [r["seed"] for r in results], "sets": {}}
    for name in _sets(results[0]):
        rows = {}
        for m in METRICS:
            pairs = [(_sets(r)[name]["before"][m], _sets(r)[name]["after"][m]) for r in results]
            delta = [a - b for b, a in pairs]
            rows[m] = {
                "before": [b for b, _ in pairs],
                "after": [a for _, a in pairs],
                "change_mean": sum(delta) / len(delta),
                "change_min": min(delta),
                "change_max": max(delta),
                "improved": sum(d > 0 for d in delta),
            }
        out["sets"][name] = rows
    out["minutes"] = [r["minutes"] for r in results]
    return out


def _markdown(table: dict[str, Any]) -> str:
    seeds = table["seeds"]
    head = "| set | metric | " + " | ".join(f"seed {s} before -> after" for s in seeds)
    lines = [head + " | change mean [min, max] | seeds improved |"]
    lines.append("|---" * (4 + len(seeds)) + "|")
    for name, rows in table["sets"].items():
        for m, row in rows.items():
            cells = " | ".join(f"{b:.3f} -> {a:.3f}" for b, a in zip(row["before"], row["after"]))
            spread = (
                f"{row['change_mean']:+.3f} [{row['change_min']:+.3f}, {row['change_max']:+.3f}]"
            )
            lines.append(f"| {name} | {m} | {cells} | {spread} | {row['improved']}/{len(seeds)} |")
    return "\n".join(lines) + "\n"


def write_seed_table(run_dir: Path, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Write RUN_DIR/seeds.json and RUN_DIR/seeds.md; returns the table."""
    table = seed_table(results)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "seeds.json").write_text(json.dumps(table, indent=2) + "\n")
    (run_dir / "seeds.md").write_text(_markdown(table))
    return table
