"""Configuration of an RL run (`tritonforge train`): rollouts + trainer + schedule + evaluation.

Covers: `ScheduleConfig`, `EvalPassConfig`, `TrainRunConfig`, `CompareConfig` (the same run per
algorithm variant, `tritonforge compare`). Torch-free. The rollout pieces are
the same sections as `tritonforge rollout` (config.rollout), the trainer is config.train's, the
Ray layout (`scale`, used only with `scale.enabled` / `train --ray`) is config.scale's.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tritonforge.config import Section
from tritonforge.config.rollout import ProblemsConfig, RolloutSections
from tritonforge.config.scale import ScaleConfig
from tritonforge.config.train import SFTDataConfig, TrainerConfig


class ScheduleConfig(Section):
    """sync: generate with the latest weights, then train. async: generation of step k+1 overlaps
    training of step k; samples more than `max_staleness` versions old are dropped."""

    mode: Literal["sync", "async"] = "sync"
    max_staleness: int = Field(1, ge=0, description="async: oldest policy lag accepted")
    queue_batches: int = Field(2, ge=1, description="async: generated batches waiting at most")
    rollouts_in_flight: int = Field(
        1,
        ge=1,
        description="async: steps whose rollouts are collected at the same time (2: the next "
        "step's episodes generate while this step's are judged); the staleness bound holds",
    )


class EvalPassConfig(Section):
    """Before/after measurement on fixed problems (pass rate and mean reward)."""

    enabled: bool = True
    problems: ProblemsConfig | None = Field(None, description="None: the training problems")
    samples: int = Field(4, ge=1, description="episodes per problem")
    temperature: float | None = Field(None, ge=0, description="None: the training temperature")
    seed: int = Field(1234, description="sampling seed, identical before and after")
    extra: dict[str, ProblemsConfig] = Field(
        default_factory=dict,
        description="further named problem sets measured the same way (e.g. held-out problems); "
        "summary.json has them under before/after.sets.NAME",
    )


class TrainRunConfig(RolloutSections):
    """`tritonforge train --config FILE`: the rollout sections (engine, task, agent, problems,
    eval, buffer, seed) plus the trainer, the schedule and the before/after measurement."""

    run_dir: str = "runs/train"
    steps: int = Field(10, ge=1, description="RL steps (one trainer update each)")
    problems_per_step: int = Field(4, ge=1)
    threads: int | None = Field(
        None,
        ge=1,
        description="torch intra-op threads for the run (pinned: same numbers on "
        "machines of the same kind); None leaves torch's default",
    )
    deterministic: bool = Field(
        False, description="deterministic torch algorithms and seeded global RNGs (from seed)"
    )
    weight_sync: Literal["auto", "state_dict", "disk"] = Field(
        "auto", description="auto: in-memory for the in-process engine, saved weights otherwise"
    )
    save_rollouts: bool = Field(True, description="write each step's groups to RUN_DIR/rollouts/")
    offline_fallback: str | None = Field(
        None,
        description="the policy where its hub id cannot be loaded here (not in the Hugging Face "
        "cache and the hub offline or unreachable): an offline model by name "
        "(training.offline_models: tiny, tiny-sft, qwen3-0.6b-shape; built on first use) or a "
        "model folder; it replaces engine.model_path and the trainer's model paths that name "
        "that hub id, and the run records it. None: such a run is refused",
    )
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    anchor: SFTDataConfig | None = Field(
        None,
        description="known-correct answers (SFT data, in the rollout format) the step guard "
        "also protects: no step may lower their log-prob by more than trainer.rl.max_logprob_drop",
    )
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    evaluate: EvalPassConfig = Field(default_factory=EvalPassConfig)
    scale: ScaleConfig = Field(
        default_factory=ScaleConfig, description="Ray: actors, placement (enabled: train --ray)"
    )


DEFAULT_VARIANTS = {
    "grpo": ["trainer.loss.type=grpo"],
    "gspo": ["trainer.loss.type=gspo"],
    "grpo_tis": ["trainer.loss.type=grpo_tis"],
}


class CompareConfig(Section):
    """`tritonforge compare`: the base run once per variant (dotted overrides of the base)."""

    run_dir: str = Field("runs/compare", description="variants run in RUN_DIR/<variant>")
    base: TrainRunConfig = Field(default_factory=TrainRunConfig)
    variants: dict[str, list[str]] = Field(
        default_factory=lambda: {k: list(v) for k, v in DEFAULT_VARIANTS.items()},
        description="variant name -> overrides of `base`",
    )
