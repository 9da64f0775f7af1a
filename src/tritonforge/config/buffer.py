"""Configuration of the rollout buffer: group size and the stage chosen for each buffer hook.

Covers: `BufferConfig`. Stage names are checked against the registries of
rollout.buffer_stages when a buffer is built or a run is planned (`rollout.buffer.check_stage_names`),
so this module stays free of the rest of the package.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tritonforge.config import Section

__all__ = ["BufferConfig"]


class BufferConfig(Section):
    """Group size and the stage chosen by name for each of the five buffer hooks."""

    group_size: int = Field(8, ge=1, description="samples per problem (n)")
    validity: str = Field("all_valid", description="all_valid | allow_partial")
    min_group_size: int = Field(2, ge=1, description="allow_partial: fewest valid samples kept")
    filter: str = Field("none", description="none | drop_zero_variance")
    zero_variance_tol: float = Field(
        1e-9, ge=0, description="returns closer than this count as equal"
    )
    max_regenerations: int = Field(
        2, ge=0, description="per problem: dropped groups that ask for a new one"
    )
    on_exhausted: Literal["drop", "keep"] = Field(
        "drop", description="filter drop after the cap: drop or accept"
    )
    normalize: str = Field(
        "zscore",
        description="zscore | mean_only | none (per turn index) | zscore_pooled | zscore_pooled_later",
    )
    epsilon: float = Field(1e-6, ge=0, description="added to the std in zscore")
    padding: str = Field("none", description="none | duplicate | duplicate_masked")
    stats: str = Field("kernel", description="kernel | basic")
    fast_p_thresholds: list[float] = Field(
        default_factory=lambda: [1.0], description="fast_p speedup thresholds"
    )
