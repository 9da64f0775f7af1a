"""`tritonforge sft --config FILE`: supervised fine-tuning (SFT cold start) of a causal LM.

Reads an `SFTRunConfig` TOML (model, optim, batch, sft.data, checkpoint, logging, dist), applies
`--set key=value` overrides, trains, and writes RUN_DIR/{config.json, metrics.jsonl,
checkpoints/, final/}. Without --config it SFTs the tiny model (runs/tiny-model, made if missing)
on the built-in suite's solutions. Under torchrun every rank runs this command (FSDP2).
"""

from __future__ import annotations

import argparse
import json

from tritonforge.commands._config_args import CONFIG_EPILOG, add_config_args, load_from_args
from tritonforge.config.train import SFTRunConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sft",
        help="supervised fine-tuning on kernel pairs or chats",
        description=__doc__,
        epilog=CONFIG_EPILOG,
    )
    add_config_args(p, SFTRunConfig, example="sft.epochs=2")
    p.add_argument("--run-dir", default=None, metavar="DIR", help="shortcut for --set run_dir=DIR")
    p.set_defaults(func=run, config_fn=config_from_args)


def config_from_args(args: argparse.Namespace) -> SFTRunConfig:
    extra = [f"run_dir={json.dumps(args.run_dir)}"] if args.run_dir else []
    return load_from_args(args, SFTRunConfig, extra=extra)


def run(args: argparse.Namespace) -> int:
    from tritonforge.plan.runs import resolve_sft

    plan = resolve_sft(config_from_args(args))
    if plan.model.source == "tiny":
        from tritonforge.rollout.tiny_model import ensure_tiny_model

        ensure_tiny_model(plan.model.path)
    from tritonforge.jobs.sft import run_sft
    from tritonforge.training.distributed import destroy_distributed

    try:
        result = run_sft(plan.config)
    finally:
        destroy_distributed()
    print(
        f"sft: {result.steps} steps, final loss {result.final_loss:.4f}, {result.examples} examples, model {result.model_dir}"
    )
    return 0
