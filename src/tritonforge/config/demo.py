"""Configuration of `tritonforge demo`: the SFT and RL runs it chains, with the demo's defaults.

Covers: `DemoConfig` (run dir, an `SFTRunConfig` and a `TrainRunConfig` whose defaults are tuned
so that a laptop CPU finishes in minutes) and `DEMO_PROBLEMS`. Torch-free; imports nothing
outside config/. Does not cover: running the demo (commands.demo).
"""

from __future__ import annotations

from pydantic import Field

from tritonforge.config import Section
from tritonforge.config.run import TrainRunConfig
from tritonforge.config.train import SFTRunConfig

__all__ = ["DEMO_PROBLEMS", "DemoConfig", "default_sft", "default_train"]

DEMO_PROBLEMS = ["relu", "leaky_relu", "sigmoid", "silu", "tanh", "hardtanh"]


def default_sft() -> SFTRunConfig:
    cfg = SFTRunConfig()
    cfg.optim.lr = 2e-3
    cfg.sft.max_steps, cfg.sft.epochs, cfg.sft.batch_size = 44, 1000, 6
    cfg.sft.data.builtin_problems = list(DEMO_PROBLEMS)
    cfg.sft.data.prompt.include_example = False
    cfg.sft.data.thinking = "none"
    cfg.checkpoint.every_steps = 0
    return cfg


def default_train() -> TrainRunConfig:
    cfg = TrainRunConfig(steps=16, problems_per_step=6)
    cfg.problems.ids = list(DEMO_PROBLEMS)
    cfg.task.prompt.include_example = False
    cfg.agent.max_turns = 2
    cfg.agent.sampling.max_new_tokens = 450
    cfg.agent.sampling.temperature = 0.7
    cfg.agent.max_context_tokens = 4096
    cfg.trainer.rl.temperature = 0.7
    cfg.trainer.optim.lr = 6e-5
    cfg.buffer.group_size = 4
    cfg.evaluate.samples = 8
    cfg.eval.settings.device = "cpu"
    cfg.eval.concurrency = 2
    cfg.trainer.checkpoint.every_steps = 4
    return cfg


class DemoConfig(Section):
    """The demo: where it writes, and the SFT and RL runs it chains."""

    run_dir: str = Field("runs/demo", description="tiny-model/, sft/, rl/ and the result go here")
    sft: SFTRunConfig = Field(default_factory=default_sft)
    train: TrainRunConfig = Field(default_factory=default_train)
