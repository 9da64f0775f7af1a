"""Configuration of the Ray scale-out layer: which actors, how many, where, and how they fail.

Covers: `ScaleConfig` (the `scale` section of a `tritonforge train` config) and one section per
role: `TrainerRole` (the torch.distributed group of trainer actors), `RolloutRole` (actors that
own an engine and an agent), `EvalRole` (one evaluator actor per GPU or CPU slot) and
`ServerRole` (vLLM/SGLang servers launched as actors). Torch-free and Ray-free.
Does not cover: building placement groups from it (scale.placement) or running anything.

Resources are Ray logical resources: `cpus`/`gpus` per actor. `colocate = true` puts trainer
rank i and its inference share (rollout workers, or servers when there are any) in one bundle
that owns `trainer.gpus` GPUs, split `colocate_trainer_share` / the rest; evaluation actors
always get bundles of their own (timing needs a GPU to itself).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tritonforge.config import Section

Strategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]


class TrainerRole(Section):
    """Trainer actors: one torch.distributed rank each (FSDP2 over all of them)."""

    workers: int = Field(1, ge=1, description="ranks (world size)")
    cpus: float = Field(1.0, gt=0, description="CPUs per rank")
    gpus: float = Field(0.0, ge=0, description="GPUs per rank (0 on CPU: gloo)")
    strategy: Strategy = Field("PACK", description="placement of the trainer bundles")
    master_addr: str | None = Field(
        None, description="rendezvous host; None: 127.0.0.1 on one node, else rank 0's node IP"
    )
    master_port: int | None = Field(None, description="None: a free port on rank 0's node")
    setup_timeout_s: float = Field(600.0, gt=0, description="model load + process group init")


class RolloutRole(Section):
    """Rollout workers: each owns an engine (in-process, or a client of its servers) and an agent."""

    workers: int = Field(1, ge=1)
    cpus: float = Field(1.0, gt=0)
    gpus: float = Field(0.0, ge=0, description="GPUs per worker (in-process engine on GPU)")
    strategy: Strategy = "PACK"
    max_restarts: int = Field(3, ge=0, description="Ray restarts of a dead worker")
    max_attempts: int = Field(3, ge=1, description="tries of one chunk of episodes")
    resync_timeout_s: float = Field(
        900.0, gt=0, description="wait this long for a restarted worker to take the weights"
    )
    seed_stride: int = Field(1000, ge=1, description="engine seed of worker i: seed + i * stride")


class EvalRole(Section):
    """Evaluation actors (0: the rollout workers use the `eval` section's backend instead)."""

    actors: int = Field(1, ge=0)
    cpus: float = Field(1.0, gt=0)
    gpus: float = Field(0.0, ge=0, description="1 per actor on GPU (timing is exclusive)")
    strategy: Strategy = "SPREAD"
    concurrency: int = Field(2, ge=1, description="evaluations in flight per actor")
    max_restarts: int = Field(5, ge=0, description="Ray restarts of a dead actor")
    max_attempts: int = Field(4, ge=1, description="tries of one evaluation (requeues + 1)")
    down_s: float = Field(5.0, ge=0, description="skip an actor this long after it failed")
    rejudge_internal: int = Field(
        1, ge=0, description="ask another actor again after an internal_error verdict"
    )
    timeout_s: float = Field(1800.0, gt=0, description="one evaluation, end to end")


class ServerRole(Section):
    """Inference servers as actors (vLLM/SGLang); their URLs replace `engine.urls`/`engine.url`.

    `command` is an argv list with `{port}`, `{host}` and `{model}` placeholders, e.g.
    ["vllm", "serve", "{model}", "--port", "{port}", "--host", "{host}"]."""

    count: int = Field(0, ge=0, description="0: no servers (in-process engine or external URLs)")
    cpus: float = Field(4.0, gt=0)
    gpus: float = Field(1.0, ge=0)
    strategy: Strategy = "PACK"
    command: list[str] = Field(default_factory=list)
    model: str | None = Field(None, description="{model}; None: engine.model_path")
    host: str | None = Field(
        None, description="{host}: None = the node's IP (multi-node); 127.0.0.1 on one node"
    )
    health_path: str = Field("/health", description="GET here answers 200 once ready")
    startup_timeout_s: float = Field(900.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict, description="extra environment")


class ScaleConfig(Section):
    """`[scale]`: run the training loop on a Ray cluster (see docs/scale.md)."""

    enabled: bool = Field(False, description="`tritonforge train --ray` sets it")
    address: str | None = Field(
        None, description="None: start a local cluster (stopped at the end); 'auto' or host:port"
    )
    namespace: str | None = Field(None, description="Ray namespace of the run's named actors")
    name: str | None = Field(
        None, description="prefix of actor and placement-group names; None: tf-<random>"
    )
    num_cpus: int | None = Field(None, ge=1, description="local cluster only; None: all")
    num_gpus: int | None = Field(None, ge=0, description="local cluster only; None: all")
    colocate: bool = Field(False, description="trainer and inference share bundles (and GPUs)")
    colocate_trainer_share: float = Field(
        0.5, gt=0, lt=1, description="colocated: the trainer's fraction of a bundle's GPUs"
    )
    placement_timeout_s: float = Field(600.0, gt=0, description="wait for resources this long")
    trainer: TrainerRole = Field(default_factory=TrainerRole)
    rollout: RolloutRole = Field(default_factory=RolloutRole)
    eval: EvalRole = Field(default_factory=EvalRole)
    servers: ServerRole = Field(default_factory=ServerRole)
