"""Building an RL run's pieces in this process: models, engine, judge, trainer, agent, metrics.

Covers: `build_pieces(plan)` (the offline model the plan falls back to and the tiny model built
first where used; the tokenizer, the engine and the judge with their calls recorded on the
accounting's timeline, the trainer with its anchors, the engine holding the judge's device gate
while it decodes, the agent), `Pieces` (what it built, closed together), `open_run` (RUN_DIR,
its saved config and the metrics logger) and `anchor_sequences`.
Does not cover: running the job (training.loop.drive) or the Ray pieces (scale.driver).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonforge.config import save_config
from tritonforge.logging_setup import get_logger
from tritonforge.plan.runs import TrainPlan
from tritonforge.rollout.engines.base import build_engine
from tritonforge.rollout.runner import build_agent, build_eval_backend
from tritonforge.training.accounting import (
    LoopAccounting,
    TimedBackend,
    Timeline,
    open_accounting,
    timed_engine,
)
from tritonforge.training.pieces import EpisodeRunner, MetricsSink

log = get_logger("tritonforge.train")


@dataclass
class Pieces:
    """What `run_training` builds for `drive`: the engine and the judge (their calls recorded on
    the accounting's timeline), the trainer, the agent, the metrics logger, the accounting."""

    engine: Any
    backend: Any
    trainer: Any
    agent: EpisodeRunner
    logger: MetricsSink
    accounting: LoopAccounting

    async def aclose(self) -> None:
        self.accounting.close()
        self.logger.close()
        await self.engine.aclose()
        await self.backend.aclose()


async def build_pieces(plan: TrainPlan) -> Pieces:
    """Build the run's pieces in this process (models built first where the plan makes them).
    The engine, trainer and judge share a GPU through the judge's device gate (device_share)."""
    cfg = plan.config
    from transformers import AutoTokenizer

    from tritonforge.training.reproducible import make_reproducible
    from tritonforge.training.rl import RLTrainer

    if cfg.deterministic or cfg.threads is not None:
        make_reproducible(cfg.seed, cfg.threads, cfg.deterministic)
    _build_models(plan)
    tokenizer = AutoTokenizer.from_pretrained(plan.tokenizer.path)
    timeline = Timeline()
    engine = build_engine(cfg.engine)
    backend = TimedBackend(build_eval_backend(cfg.eval), timeline)
    run_dir, logger = open_run(plan)
    try:
        trainer = RLTrainer(cfg.trainer, tokenizer=tokenizer, run_dir=run_dir)
        if cfg.anchor is not None:
            trainer.anchors = anchor_sequences(cfg.anchor, tokenizer)
        accounting = open_accounting(cfg, str(trainer.ctx.device), timeline)
        if hasattr(engine, "device_hold"):  # the in-process engine: each decode step holds it
            engine.device_hold = accounting.share.hold
        engine = timed_engine(engine, timeline)
        agent = build_agent(engine, tokenizer, cfg.task, cfg.agent, backend, cfg.eval)
    except BaseException:
        logger.close()
        await engine.aclose()
        await backend.aclose()
        raise
    return Pieces(engine, backend, trainer, agent, logger, accounting)


def anchor_sequences(data: Any, tokenizer: Any) -> list[Any]:
    """The step guard's anchors: the SFT data of `data` (an SFTDataConfig) as TrainSequences."""
    from tritonforge.training.batching import TrainSequence
    from tritonforge.training.sft_data import build_sft_dataset

    examples = build_sft_dataset(data, tokenizer).examples
    return [TrainSequence(e.token_ids, e.loss_mask, index=i) for i, e in enumerate(examples)]


def _build_models(plan: TrainPlan) -> None:
    """The offline model the plan falls back to and the tiny model where the plan uses them,
    when they are not built yet."""
    if plan.offline_model is not None:
        from tritonforge.training.offline_models import ensure_offline_model

        log.warning("policy: %s", plan.fallback_note)
        ensure_offline_model(plan.offline_model)
    refs = [plan.policy, plan.tokenizer, plan.episodes.engine_model]
    if any(ref.source == "tiny" for ref in refs):
        from tritonforge.rollout.tiny_model import ensure_tiny_model

        for ref in {r.path for r in refs if r.source == "tiny"}:
            ensure_tiny_model(ref)


def open_run(plan: TrainPlan) -> tuple[Path, MetricsSink]:
    """Create RUN_DIR, save the resolved config there, open the metrics logger."""
    from tritonforge.training.metrics import MetricsLogger

    cfg = plan.config
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, plan.run_dir / "config.json")
    return plan.run_dir, MetricsLogger(
        plan.run_dir, cfg.trainer.logging, run_config=cfg.model_dump(mode="json")
    )
