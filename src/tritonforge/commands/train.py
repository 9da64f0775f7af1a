"""`tritonforge train --config ...`: the RL loop (rollouts, buffer, trainer, weight pushes).

With `--ray` (or `scale.enabled = true`) the same loop runs on a Ray cluster (tritonforge.scale).
"""

from __future__ import annotations

import argparse
import asyncio
import json

from tritonforge.config import load_config
from tritonforge.config.run import TrainRunConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="multi-turn RL against the evaluator", description=__doc__)
    p.add_argument("--config", help="TrainRunConfig TOML (see configs/)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override, e.g. --set steps=3",
    )
    p.add_argument("--report", action="store_true", help="write RUN_DIR/report.html at the end")
    p.add_argument(
        "--ray",
        action="store_true",
        help="run on Ray with the [scale] section (docs/scale.md); same as --set scale.enabled=true",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = load_config(TrainRunConfig, args.config, args.set)
    if getattr(args, "ray", False):
        cfg.scale.enabled = True
    if cfg.scale.enabled:
        from tritonforge.scale.driver import run_training_ray

        summary = asyncio.run(run_training_ray(cfg))
    else:
        from tritonforge.training.loop import run_training

        summary = asyncio.run(run_training(cfg))
    if args.report:
        from tritonforge.training.report import write_report

        write_report(cfg.run_dir)
    print(
        json.dumps(
            {k: summary.get(k) for k in ("steps", "policy_version", "train_seconds")}
            | {
                "before": (summary.get("before") or {}).get("overall"),
                "after": (summary.get("after") or {}).get("overall"),
            }
        )
    )
    return 0
