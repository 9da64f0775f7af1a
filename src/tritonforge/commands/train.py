"""`tritonforge train --config FILE`: multi-turn RL against the evaluator.

Each step plays `problems_per_step` problems x `buffer.group_size` episodes with the engine,
judges every turn, turns rewards into per-turn advantages in the buffer, runs one trainer update
and pushes the new weights to the engine; before and after the steps it measures pass rate and
mean reward on the same problems with the same sampling seed. Writes RUN_DIR/{config.json,
metrics.jsonl, rollouts/, checkpoints/, weights/, summary.json}.

The config is checked completely first (problems, registry names, model folders, devices, run
dir): a request that cannot run is refused in one line before any weights load or RUN_DIR is
made. With --ray (or scale.enabled = true) the same loop runs on a Ray cluster (docs/scale.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json

from tritonforge.commands._config_args import CONFIG_EPILOG, add_config_args, load_from_args
from tritonforge.config.run import TrainRunConfig

EXAMPLES = """examples (configs/cpu-tiny.toml trains runs/demo/sft/final: run `tritonforge demo`,
or `tritonforge sft --run-dir runs/demo/sft`, first):
  tritonforge train --config configs/cpu-tiny.toml
  tritonforge train --config configs/cpu-tiny.toml --set steps=2 --set buffer.group_size=2
  tritonforge train --config configs/cpu-tiny.toml --print-config
  tritonforge train --list-keys | grep loss
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="multi-turn RL against the evaluator",
        description=__doc__,
        epilog=f"{CONFIG_EPILOG}\n\n{EXAMPLES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_args(p, TrainRunConfig, example="steps=3 or trainer.loss.type=gspo")
    p.add_argument("--run-dir", default=None, metavar="DIR", help="shortcut for --set run_dir=DIR")
    p.add_argument("--report", action="store_true", help="write RUN_DIR/report.html at the end")
    p.add_argument(
        "--ray",
        action="store_true",
        help="run on Ray with the [scale] section (docs/scale.md); same as --set scale.enabled=true",
    )
    p.set_defaults(func=run, config_fn=config_from_args)


def config_from_args(args: argparse.Namespace) -> TrainRunConfig:
    extra = [f"run_dir={json.dumps(args.run_dir)}"] if args.run_dir else []
    if args.ray:
        extra.append("scale.enabled=true")
    return load_from_args(args, TrainRunConfig, extra=extra)


def run(args: argparse.Namespace) -> int:
    from tritonforge.plan.runs import resolve_train

    plan = resolve_train(config_from_args(args))
    if plan.ray:
        from tritonforge.scale.driver import run_training_ray

        summary = asyncio.run(run_training_ray(plan))
    else:
        from tritonforge.jobs.loop import run_training

        summary = asyncio.run(run_training(plan))
    if args.report:
        from tritonforge.jobs.report import write_report

        write_report(plan.run_dir)
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
