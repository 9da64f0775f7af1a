"""Configuration of the multi-turn agent: how an episode is played and how returns are formed.

Covers: `ReturnsConfig` (per-turn rewards -> per-turn returns) and `AgentConfig` (turns, early
stop, context cap, sampling, returns). Torch-free; imports nothing from the rest of the package.
Does not cover: the agent loop (rollout.agent) or the returns registry (rollout.returns).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tritonforge.config import Section
from tritonforge.config.engine import SamplingParams

__all__ = ["AgentConfig", "ReturnsConfig"]


class ReturnsConfig(Section):
    """How per-turn rewards become the per-turn returns the buffer normalises."""

    type: str = Field(
        "discounted",
        description="discounted | trajectory_last | trajectory_max | trajectory_discounted",
    )
    gamma: float = Field(0.4, ge=0.0, le=1.0, description="per-turn discount (discounted modes)")


class AgentConfig(Section):
    """How an episode is played."""

    max_turns: int = Field(3, ge=1, description="assistant turns per episode")
    early_stop: Literal["correct", "never", "speedup"] = Field(
        "correct",
        description="stop when correct; never; or when correct with speedup >= stop_speedup",
    )
    stop_speedup: float = Field(1.5, description="early_stop=speedup: threshold")
    max_context_tokens: int = Field(8192, ge=64, description="stop before a turn would exceed this")
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    returns: ReturnsConfig = Field(default_factory=ReturnsConfig)
