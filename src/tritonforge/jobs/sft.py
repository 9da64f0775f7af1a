"""The `tritonforge sft` run: config -> data -> SFT trainer -> final Hugging Face model.

Covers: `run_sft` (reproducibility settings, distributed set-up, the saved config, the SFT data
of jobs.sft_data, resume, the metrics log, the final checkpoint and the exported model in
RUN_DIR/output_dir) and its `SFTResult`. Does not cover: the trainer (training.sft) or how
the data is made (jobs.sft_data).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from tritonforge.config import save_config
from tritonforge.config.train import SFTRunConfig
from tritonforge.jobs.sft_data import build_sft_dataset
from tritonforge.logging_setup import get_logger
from tritonforge.training.distributed import init_distributed
from tritonforge.training.metrics import MetricsLogger
from tritonforge.training.model import load_tokenizer
from tritonforge.training.reproducible import make_reproducible
from tritonforge.training.sft import SFTTrainer

__all__ = ["SFTResult", "run_sft"]

log = get_logger(__name__)


@dataclass
class SFTResult:
    steps: int
    final_loss: float
    model_dir: Path | None
    examples: int
    dropped: dict[str, int] = field(default_factory=dict)


def run_sft(cfg: SFTRunConfig, model: nn.Module | None = None, tokenizer: Any = None) -> SFTResult:
    """The whole SFT run of `tritonforge sft`: data, train (resuming if asked), final model."""
    if cfg.deterministic or cfg.threads is not None:
        make_reproducible(cfg.sft.seed, cfg.threads, cfg.deterministic)
    ctx = init_distributed(cfg.dist)
    run_dir = Path(cfg.run_dir)
    if ctx.is_main:
        save_config(cfg, run_dir / "config.json")
    tokenizer = tokenizer or load_tokenizer(cfg.model)
    data = build_sft_dataset(cfg.sft.data, tokenizer)
    trainer = SFTTrainer(cfg, model=model, tokenizer=tokenizer, ctx=ctx)
    if cfg.checkpoint.resume and trainer.resume():
        log.info("resumed", extra={"fields": {"step": trainer.step, "epoch": trainer.epoch}})
    logger = MetricsLogger(run_dir, cfg.logging, ctx.is_main, cfg.model_dump(mode="json"))
    try:
        loss = trainer.fit(data.examples, logger)
    finally:
        logger.close()
    every = cfg.checkpoint.every_steps
    if cfg.checkpoint.save_final and trainer.step > 0 and not (every and trainer.step % every == 0):
        trainer.save_checkpoint()
    out = Path(cfg.output_dir)
    model_dir = trainer.core.export(out if out.is_absolute() else run_dir / out)
    log.info(
        "sft done", extra={"fields": {"steps": trainer.step, "loss": loss, "model": str(model_dir)}}
    )
    return SFTResult(trainer.step, loss, model_dir, len(data), dict(data.dropped))
