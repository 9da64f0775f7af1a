"""`tritonforge rollout --config FILE`: collect multi-turn trajectories to a file (JSONL/parquet).

The config (a RolloutConfig: engine, task, agent, problems, eval, buffer, output) is checked
completely before the model loads; the trajectories go to `output`, the resolved config beside
them (OUTPUT.config.json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from tritonforge.commands._config_args import CONFIG_EPILOG, add_config_args, load_from_args
from tritonforge.config import save_config
from tritonforge.config.rollout import RolloutConfig
from tritonforge.plan.runs import RolloutPlan


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rollout",
        help="collect trajectories with a model and the evaluator",
        description=__doc__,
        epilog=CONFIG_EPILOG,
    )
    add_config_args(p, RolloutConfig, example="agent.max_turns=2")
    p.set_defaults(func=run, config_fn=config_from_args)


def config_from_args(args: argparse.Namespace) -> RolloutConfig:
    return load_from_args(args, RolloutConfig)


async def _main(plan: RolloutPlan) -> dict:
    from transformers import AutoTokenizer

    from tritonforge.rollout.buffer import RolloutBuffer
    from tritonforge.rollout.engines.base import build_engine
    from tritonforge.rollout.runner import build_agent, build_eval_backend, collect
    from tritonforge.rollout.tiny_model import ensure_tiny_model

    cfg = plan.config
    if plan.episodes.engine_model.source == "tiny":
        ensure_tiny_model(plan.episodes.engine_model.path)
    tokenizer = AutoTokenizer.from_pretrained(plan.episodes.engine_model.path)
    engine = build_engine(cfg.engine)
    backend = build_eval_backend(cfg.eval)
    try:
        agent = build_agent(engine, tokenizer, cfg.task, cfg.agent, backend, cfg.eval)
        buffer = RolloutBuffer(cfg.buffer)
        await collect(agent, plan.episodes.problems, cfg.buffer.group_size, buffer)
        out = buffer.save(plan.output)
        stats = buffer.stats()
        stats["output"] = str(out)
        return stats
    finally:
        await engine.aclose()
        await backend.aclose()


def run(args: argparse.Namespace) -> int:
    from tritonforge.plan.runs import resolve_rollout

    plan = resolve_rollout(config_from_args(args))
    save_config(plan.config, plan.output.with_suffix(".config.json"))
    stats = asyncio.run(_main(plan))
    print(json.dumps(stats, default=str))
    print(f"wrote {stats['output']}", file=sys.stderr)
    return 0
