"""Configuration of rollout collection: problems, evaluation backend, engine, agent, buffer.

Covers: `ProblemsConfig`, `EvalBackendConfig`, `EpisodeSections` (engine, task, agent, problems,
eval: what playing episodes needs, shared by `bench-model`), `RolloutSections` (those plus the
buffer and seed, shared by `rollout` and `train`) and `RolloutConfig` (the `tritonforge rollout`
command's tree) and `BenchConfig` (`tritonforge bench-model`). Torch-free; imports nothing
outside config/.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tritonforge.config import Section
from tritonforge.config.agent import AgentConfig
from tritonforge.config.buffer import BufferConfig
from tritonforge.config.engine import EngineConfig, HFEngineConfig
from tritonforge.config.eval import EvalSettings
from tritonforge.config.task import TaskConfig


class ProblemsConfig(Section):
    """Which problems to sample from."""

    suite: str = Field("builtin", description="builtin | kernelbench | arith")
    size: str | None = Field("cpu", description="builtin: cpu|gpu; kernelbench: original|scaled")
    source: str | None = Field(None, description="kernelbench: dataset dir or JSONL/parquet file")
    level: int | None = None
    name: str | None = Field(None, description="glob on name/id")
    category: str | None = None
    ids: list[str] = Field(default_factory=list, description="exact ids or names")
    limit: int | None = Field(None, ge=1, description="keep the first N after filtering")


class EvalBackendConfig(Section):
    """Where candidates are judged: in this process (local) or by evaluation servers (http)."""

    type: Literal["local", "http"] = "local"
    urls: list[str] = Field(default_factory=lambda: ["http://127.0.0.1:18188"])
    token: str | None = Field(None, description="http: bearer token (or TRITONFORGE_EVAL_TOKEN)")
    concurrency: int = Field(2, ge=1, description="evaluations in flight")
    timeout_s: float = Field(900.0, gt=0, description="http: one evaluation request")
    group_timing: bool = Field(
        True,
        description="evaluations of one problem asked for together (a GRPO group's samples) "
        "are judged as one group: their timings one round-robin against one reference",
    )
    cache: bool = Field(
        False,
        description="judge each distinct program once per run (untimed verdicts only; "
        "rollout.verdict_cache); sound on the CPU interpreter, where verdicts are deterministic",
    )
    settings: EvalSettings = Field(default_factory=EvalSettings)


class EpisodeSections(Section):
    """What playing episodes needs: an engine, a task, an agent, problems and a judge."""

    engine: EngineConfig = Field(default_factory=HFEngineConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    problems: ProblemsConfig = Field(default_factory=ProblemsConfig)
    eval: EvalBackendConfig = Field(default_factory=EvalBackendConfig)


class RolloutSections(EpisodeSections):
    """Episodes collected in groups: the episode sections plus the buffer and a seed."""

    buffer: BufferConfig = Field(default_factory=BufferConfig)
    seed: int = 0


class RolloutConfig(RolloutSections):
    """`tritonforge rollout`: collect trajectories to a file."""

    output: str = Field("runs/rollout/trajectories.jsonl", description=".jsonl or .parquet")


class BenchConfig(EpisodeSections):
    """`tritonforge bench-model`: k episodes per problem, pass@k, fast_p, per-turn pass rate."""

    out: str = Field("runs/bench", description="output folder (bench.json, bench.md, bench.png)")
    samples: int = Field(4, ge=1, description="k episodes per problem")
