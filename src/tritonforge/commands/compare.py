"""`tritonforge compare --config ...`: the same RL run per algorithm variant, one report.

Each variant is the base TrainRunConfig plus dotted overrides (default: GRPO, GSPO, GRPO+TIS),
run with the same seeds, problems and budget into RUN_DIR/<variant>; RUN_DIR/comparison.html
overlays their curves and tabulates before/after pass rate and reward.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from pydantic import Field

from tritonforge.config import Section, load_config, save_config, with_overrides
from tritonforge.config.run import TrainRunConfig

DEFAULT_VARIANTS = {
    "grpo": ["trainer.loss.type=grpo"],
    "gspo": ["trainer.loss.type=gspo"],
    "grpo_tis": ["trainer.loss.type=grpo_tis"],
}


class CompareConfig(Section):
    run_dir: str = "runs/compare"
    base: TrainRunConfig = Field(default_factory=TrainRunConfig)
    variants: dict[str, list[str]] = Field(
        default_factory=lambda: {k: list(v) for k, v in DEFAULT_VARIANTS.items()}
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="run RL variants side by side (GRPO vs GSPO vs GRPO+TIS)",
        description=__doc__,
    )
    p.add_argument("--config", help="CompareConfig TOML")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override, e.g. --set base.steps=3",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = load_config(CompareConfig, args.config, args.set)
    from tritonforge.training.loop import run_training
    from tritonforge.training.report import write_comparison, write_report

    save_config(cfg, f"{cfg.run_dir}/compare_config.json")
    runs = {}
    for name, overrides in cfg.variants.items():
        variant = with_overrides(cfg.base, [*overrides, f"run_dir={cfg.run_dir}/{name}"])
        summary = asyncio.run(run_training(variant))
        write_report(variant.run_dir)
        runs[name] = variant.run_dir
        print(json.dumps({"variant": name, "after": (summary.get("after") or {}).get("overall")}))
    print(write_comparison(cfg.run_dir, runs))
    return 0
