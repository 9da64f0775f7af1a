"""`tritonforge rollout --config ...`: collect multi-turn trajectories to a file (JSONL/parquet)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from tritonforge.config import load_config, save_config
from tritonforge.config.rollout import RolloutConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rollout", help="collect trajectories with a model and the evaluator", description=__doc__
    )
    p.add_argument("--config", help="RolloutConfig TOML")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override, e.g. --set agent.max_turns=2",
    )
    p.set_defaults(func=run)


async def _main(cfg: RolloutConfig) -> dict:
    from transformers import AutoTokenizer

    from tritonforge.rollout.buffer import RolloutBuffer
    from tritonforge.rollout.engines.base import build_engine
    from tritonforge.rollout.runner import build_agent, build_eval_backend, collect, load_problems
    from tritonforge.rollout.tiny_model import DEFAULT_TINY_MODEL_DIR, ensure_tiny_model

    if cfg.engine.type == "hf" and Path(cfg.engine.model_path) == Path(DEFAULT_TINY_MODEL_DIR):
        ensure_tiny_model(cfg.engine.model_path)
    tok_path = cfg.engine.model_path
    tokenizer = AutoTokenizer.from_pretrained(tok_path)
    engine = build_engine(cfg.engine)
    backend = build_eval_backend(cfg.eval)
    try:
        agent = build_agent(engine, tokenizer, cfg.task, cfg.agent, backend, cfg.eval)
        buffer = RolloutBuffer(cfg.buffer)
        problems = load_problems(cfg.problems)
        await collect(agent, problems, cfg.buffer.group_size, buffer)
        out = buffer.save(cfg.output)
        stats = buffer.stats()
        stats["output"] = str(out)
        return stats
    finally:
        await engine.aclose()
        await backend.aclose()


def run(args: argparse.Namespace) -> int:
    cfg = load_config(RolloutConfig, args.config, args.set)
    save_config(cfg, Path(cfg.output).with_suffix(".config.json"))
    stats = asyncio.run(_main(cfg))
    print(json.dumps(stats, default=str))
    print(f"wrote {stats['output']}", file=sys.stderr)
    return 0
