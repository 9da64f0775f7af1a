"""`tritonforge sft --config FILE`: supervised fine-tuning (SFT cold start) of a causal LM.

Reads an `SFTRunConfig` TOML (model, optim, batch, sft.data, checkpoint, logging, dist), applies
`--set key=value` overrides, trains, and writes RUN_DIR/{config.json, metrics.jsonl,
checkpoints/, final/}. Without --config it SFTs the tiny model (runs/tiny-model, made if missing)
on the built-in suite's solutions. Under torchrun every rank runs this command (FSDP2).
"""

from __future__ import annotations

import argparse

from tritonforge.config import load_config
from tritonforge.config.train import SFTRunConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sft", help="supervised fine-tuning on kernel pairs or chats", description=__doc__
    )
    p.add_argument("--config", metavar="TOML", default=None, help="SFTRunConfig file")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override, e.g. --set sft.epochs=2",
    )
    p.add_argument("--run-dir", default=None, help="shortcut for --set run_dir=DIR")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    overrides = list(args.set)
    if args.run_dir:
        overrides.append(f'run_dir="{args.run_dir}"')
    cfg = load_config(SFTRunConfig, args.config, overrides)
    if cfg.model.path == "runs/tiny-model":
        from tritonforge.rollout.tiny_model import ensure_tiny_model

        ensure_tiny_model(cfg.model.path)
    from tritonforge.training.distributed import destroy_distributed
    from tritonforge.training.sft import run_sft

    try:
        result = run_sft(cfg)
    finally:
        destroy_distributed()
    print(
        f"sft: {result.steps} steps, final loss {result.final_loss:.4f}, {result.examples} examples, model {result.model_dir}"
    )
    return 0
