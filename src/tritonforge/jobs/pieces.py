"""The typed pieces the RL driver composes: trainer, episode runner, metrics sink.

Covers: the Protocols `jobs.loop.drive` is written against. `RLTrainer` and an `Agent`
(one process) and `scale.TrainerGroup` and `scale.RayAgent` (Ray actors) satisfy them; tests
check both. Does not cover: any implementation. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tritonforge.config.engine import SamplingParams
from tritonforge.rollout.engines.base import Engine
from tritonforge.types import Problem, Trajectory

__all__ = ["EpisodeRunner", "Job", "MetricsSink", "PolicyTrainer", "StateDictEngine", "StepResult"]

Job = tuple[Problem, int, str]  # (problem, sample index, group id)


class StepResult(Protocol):
    """What one trainer update reports (training.rl.StepMetrics)."""

    def as_dict(self) -> dict[str, float]: ...


@runtime_checkable
class PolicyTrainer(Protocol):
    """The policy being trained: one update per batch, weights out, checkpoints."""

    @property
    def policy_version(self) -> int: ...

    def train_step(self, items: Sequence[Trajectory]) -> Any:  # a StepResult
        ...

    def save_weights(self) -> str | Path: ...

    def state_dict(self) -> Any: ...

    def checkpoint(self, extra: dict[str, Any] | None = None) -> str | Path: ...

    def resume(self) -> dict[str, Any] | None: ...

    def should_checkpoint(self) -> bool: ...


@runtime_checkable
class EpisodeRunner(Protocol):
    """Plays episodes with `engine` at sampling `params` (rollout.agent.Agent)."""

    engine: Engine
    params: SamplingParams

    async def run(self, jobs: list[Job]) -> list[Trajectory]: ...


@runtime_checkable
class StateDictEngine(Protocol):
    """An engine that takes weights in memory (the in-process engine) besides from disk."""

    async def load_state_dict(self, state: Any, version: int) -> bool: ...


@runtime_checkable
class MetricsSink(Protocol):
    """Where the driver's per-step rows go (training.metrics.MetricsLogger)."""

    def log(self, step: int, metrics: Mapping[str, Any], prefix: str = "") -> str: ...

    def close(self) -> None: ...
