"""Configuration of `tritonforge demo`: the SFT and RL runs it chains, with the demo's defaults.

Covers: `DemoConfig` (run dir, seed(s), threads, an `SFTRunConfig` and a `TrainRunConfig` whose
defaults are tuned so that a laptop CPU finishes in minutes), `DEMO_PROBLEMS` and the demo's
problem sets: SFT on the six elementwise built-in solutions, their `variants` "sft" spellings and
judged repair episodes; RL on the "rl" spellings (prompts SFT never showed), with a KL penalty to
the SFT model against forgetting; the "heldout" spellings and the SFT problems measured before
and after. Torch-free; imports nothing outside config/. Does not cover: running the demo (commands.demo).
"""

from __future__ import annotations

from pydantic import Field

from tritonforge.config import Section
from tritonforge.config.rollout import ProblemsConfig
from tritonforge.config.run import TrainRunConfig
from tritonforge.config.train import OptimConfig, SFTDataConfig, SFTRunConfig

__all__ = [
    "DEMO_PROBLEMS",
    "REPAIR_MUTATIONS",
    "DemoConfig",
    "default_sft",
    "default_train",
    "demo_sft_data",
]

DEMO_PROBLEMS = ["relu", "leaky_relu", "sigmoid", "silu", "tanh", "hardtanh"]
# the rules text of `system` is ~550 tokens a tiny model cannot use
SYSTEM_PROMPT = "system_compact"
REPAIR_MUTATIONS = ["kernel_name_mismatch", "other_kernel", "syntax_error", "mask_off_by_one"]


def variants(split: str) -> ProblemsConfig:
    """The `variants` suite's split "sft", "rl" or "heldout"."""
    return ProblemsConfig(suite="variants", category=split)


def demo_sft_data(repair: bool) -> SFTDataConfig:
    """The demo's SFT pairs in the rollout format (with repair episodes when `repair`)."""
    data = SFTDataConfig(thinking="none", builtin_problems=list(DEMO_PROBLEMS))
    data.extra_problems = [variants("sft")]
    if repair:
        data.repair.mutations = list(REPAIR_MUTATIONS)
        data.repair.per_problem = 2
    data.prompt.include_example = False
    data.prompt.system_template = SYSTEM_PROMPT
    return data


def default_sft() -> SFTRunConfig:
    cfg = SFTRunConfig()
    cfg.optim = OptimConfig(
        lr=3e-3, schedule="linear", warmup_steps=3, total_steps=100, min_lr_ratio=0.05
    )
    cfg.sft.max_steps, cfg.sft.epochs, cfg.sft.batch_size = 100, 1000, 8
    cfg.sft.data = demo_sft_data(repair=True)
    cfg.checkpoint.every_steps = 0
    cfg.deterministic = True
    return cfg


def default_train() -> TrainRunConfig:
    cfg = TrainRunConfig(steps=16, problems_per_step=6, deterministic=True)
    cfg.problems = variants("rl")
    cfg.task.prompt.include_example = False
    cfg.task.prompt.system_template = SYSTEM_PROMPT
    cfg.agent.max_turns = 2
    cfg.agent.sampling.max_new_tokens = 400
    cfg.agent.sampling.temperature = 0.7
    cfg.agent.max_context_tokens = 2048
    cfg.engine.max_batch_size = 128
    cfg.trainer.rl.temperature = 0.7
    # the guard binds on the batch's correct answers only: with the SFT answers as anchors
    # (`anchor`, drift counted from the first step) every step after the first was undone
    cfg.trainer.rl.max_logprob_drop = 0.5
    # KL to the SFT model on the RL samples: without it the SFT problems were forgotten
    # (docs/benchmarks.md, "A KL anchor against forgetting")
    cfg.trainer.loss.kl_coef = 0.5
    cfg.trainer.optim.lr = 6e-5
    cfg.buffer.group_size = 4
    cfg.evaluate.samples = 4
    cfg.evaluate.extra = {
        "sft_problems": ProblemsConfig(ids=list(DEMO_PROBLEMS)),
        "heldout": variants("heldout"),
    }
    cfg.eval.settings.device = "cpu"
    cfg.eval.concurrency = 2
    cfg.eval.cache = True
    cfg.trainer.checkpoint.every_steps = 4
    return cfg


class DemoConfig(Section):
    """The demo: where it writes, its seed and threads, and the SFT and RL runs it chains."""

    run_dir: str = Field("runs/demo", description="tiny-model/, sft/, rl/ and the result go here")
    seed: int = Field(0, description="sets every random source of the SFT and RL runs")
    seeds: list[int] = Field(
        default_factory=list, description="run the whole demo once per seed (RUN_DIR/seed_N)"
    )
    threads: int = Field(
        1,
        ge=1,
        description="torch threads; pinned so that runs repeat exactly (and one core stays "
        "free for the evaluator)",
    )
    sft: SFTRunConfig = Field(default_factory=default_sft)
    train: TrainRunConfig = Field(default_factory=default_train)
