"""`tritonforge compare --config FILE`: the same RL run per algorithm variant, one report.

Each variant is the base TrainRunConfig plus dotted overrides (default: GRPO, GSPO, GRPO+TIS),
run with the same seeds, problems and budget into RUN_DIR/<variant>; RUN_DIR/comparison.html
overlays their curves and tabulates before/after pass rate and reward. Every variant's plan is
checked before the first one starts.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from tritonforge.commands._config_args import CONFIG_EPILOG, add_config_args, load_from_args
from tritonforge.config import save_config
from tritonforge.config.run import CompareConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="run RL variants side by side (GRPO vs GSPO vs GRPO+TIS)",
        description=__doc__,
        epilog=CONFIG_EPILOG,
    )
    add_config_args(p, CompareConfig, example="base.steps=3")
    p.set_defaults(func=run, config_fn=config_from_args)


def config_from_args(args: argparse.Namespace) -> CompareConfig:
    return load_from_args(args, CompareConfig)


def run(args: argparse.Namespace) -> int:
    from tritonforge.plan.runs import resolve_compare

    plan = resolve_compare(config_from_args(args))
    from tritonforge.jobs.loop import run_training
    from tritonforge.jobs.report import write_comparison, write_report

    save_config(plan.config, f"{plan.config.run_dir}/compare_config.json")
    runs = {}
    for name, variant in plan.variants.items():
        summary = asyncio.run(run_training(variant))
        write_report(variant.run_dir)
        runs[name] = str(variant.run_dir)
        print(json.dumps({"variant": name, "after": (summary.get("after") or {}).get("overall")}))
    print(write_comparison(plan.config.run_dir, runs))
    return 0
