"""Credit of repair turns in a run's saved rollouts, under each registered normaliser.

A repair turn is a second (or later) turn after a failed turn. For every accepted group of
RUN_DIR/rollouts/step_*.jsonl the saved raw per-turn returns are normalised again by each
normaliser of rollout.buffer_stages.NORMALIZERS, and the repair turns' advantages are tabulated:
how many worked (the turn was correct) or failed, how many got exactly 0, and the mean advantage
of each kind. `recorded` is what the run itself trained on (`meta["norm_returns"]`). Prints one
JSON document (and writes it to --out).

Usage: python benchmarks/repair_credit.py RUN_DIR [--out FILE]
(RUN_DIR: an RL run dir, e.g. the demo's runs/demo/rl)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tritonforge.rollout.buffer import load_groups
from tritonforge.rollout.buffer_stages import NORMALIZERS
from tritonforge.types import Group, Status


def _repair_turns(g: Group) -> list[tuple[int, int, bool]]:
    """(sample, turn, worked) for every turn after the first of each sample."""
    out = []
    for i, traj in enumerate(g.trajectories):
        for t, turn in enumerate(traj.turns[1:], start=1):
            ok = turn.verdict is not None and turn.verdict.status is Status.CORRECT
            out.append((i, t, ok))
    return out


def _tally() -> dict[str, float]:
    return {
        "worked": 0,
        "failed": 0,
        "worked_zero": 0,
        "failed_zero": 0,
        "sum_w": 0.0,
        "sum_f": 0.0,
    }


def _add(tally: dict[str, float], adv: float, worked: bool) -> None:
    kind = "worked" if worked else "failed"
    tally[kind] += 1
    tally[f"{kind}_zero"] += abs(adv) < 1e-9
    tally["sum_w" if worked else "sum_f"] += adv


def _finish(tally: dict[str, float]) -> dict[str, float]:
    w, f = tally.pop("sum_w"), tally.pop("sum_f")
    tally["mean_adv_worked"] = round(w / tally["worked"], 4) if tally["worked"] else 0.0
    tally["mean_adv_failed"] = round(f / tally["failed"], 4) if tally["failed"] else 0.0
    return tally


def credit(run_dir: Path, eps: float = 1e-6) -> dict[str, dict[str, float]]:
    tallies = {name: _tally() for name in ["recorded", *NORMALIZERS]}
    for path in sorted((run_dir / "rollouts").glob("step_*.jsonl")):
        for g in load_groups(path):
            repairs = _repair_turns(g)
            if not repairs:
                continue
            returns = [t.returns for t in g.trajectories]
            tables = {name: fn(returns, eps) for name, fn in NORMALIZERS.items()}
            tables["recorded"] = [t.meta.get("norm_returns", []) for t in g.trajectories]
            for name, table in tables.items():
                for i, t, worked in repairs:
                    _add(tallies[name], table[i][t], worked)
    return {name: _finish(t) for name, t in tallies.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    doc = {"run_dir": args.run_dir.name, "repair_turns": credit(args.run_dir)}
    text = json.dumps(doc, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
