"""The trainer as Ray actors: N ranks of one torch.distributed group running `RLTrainer` (FSDP2).

Covers: `TrainerWorker` (the actor class: sets MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE/LOCAL_RANK,
joins the process group (gloo on CPU, nccl on GPU, via training.distributed), builds the
RLTrainer; every collective method must run on every rank) and `TrainerGroup` (the driver's
handle with RLTrainer's interface as the driver loop uses it: `train_step` sends one global batch
through the object store to every rank, as RLTrainer expects; `state_dict` returns rank 0's full
weights as an ObjectRef that rollout workers resolve themselves; `save_weights`, `checkpoint`,
`resume`, `should_checkpoint`, `policy_version`).
Does not cover: placement (scale.placement) or trainer failure recovery (a dead rank fails the
run; `resume` continues from the newest checkpoint).

Ray gives each GPU actor its own CUDA_VISIBLE_DEVICES, so every rank uses cuda:0 (LOCAL_RANK 0).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Sequence
from typing import Any

from tritonforge.config.run import TrainRunConfig
from tritonforge.logging_setup import get_logger

__all__ = ["TrainerGroup", "TrainerWorker", "get_all"]

log = get_logger(__name__)


def _node_ip() -> str:
    try:
        import ray

        return str(ray.util.get_node_ip_address())
    except Exception:  # outside Ray (tests): the loopback
        return "127.0.0.1"


class TrainerWorker:
    """One trainer rank (see the module docstring)."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world
        self.trainer: Any = None

    def node_ip(self) -> str:
        return _node_ip()

    def free_port(self) -> int:
        """A port free on this node now (rank 0's rendezvous)."""
        with socket.socket() as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def setup(self, cfg_json: str, master_addr: str, master_port: int) -> dict[str, Any]:
        """Join the process group and build the trainer (all ranks at once)."""
        from transformers import AutoTokenizer

        from tritonforge.training.distributed import init_distributed
        from tritonforge.training.rl import RLTrainer

        cfg = TrainRunConfig.model_validate_json(cfg_json)
        os.environ.update(
            {
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": str(master_port),
                "RANK": str(self.rank),
                "WORLD_SIZE": str(self.world),
                "LOCAL_RANK": "0",
                "LOCAL_WORLD_SIZE": "1",
            }
        )
        ctx = init_distributed(cfg.trainer.dist)
        model = cfg.trainer.model
        tokenizer = AutoTokenizer.from_pretrained(model.tokenizer_path or model.path)
        self.trainer = RLTrainer(cfg.trainer, tokenizer=tokenizer, run_dir=cfg.run_dir, ctx=ctx)
        return {"rank": self.rank, "pid": os.getpid(), "device": str(ctx.device)}

    def train_step(self, trajs: list[Any]) -> Any:
        return self.trainer.train_step(trajs)

    def state_dict(self) -> dict[str, Any] | None:
        """Full HF-keyed weights on rank 0 (a collective under FSDP); None on other ranks."""
        sd = self.trainer.state_dict()
        if self.rank != 0:
            return None
        return {k: v.detach().cpu() for k, v in sd.items()}

    def save_weights(self) -> str:
        return str(self.trainer.save_weights())

    def checkpoint(self, extra: dict[str, Any]) -> str:
        return str(self.trainer.checkpoint(extra=extra))

    def resume(self) -> dict[str, Any] | None:
        return self.trainer.resume()

    def policy_version(self) -> int:
        return int(self.trainer.policy_version)

    def param_sum(self) -> float:
        """Sum of |w| over the full weights (a collective under FSDP; every rank returns it)."""
        sd = self.trainer.state_dict()
        return float(sum(v.detach().double().abs().sum() for v in sd.values()))

    def close(self) -> None:
        from tritonforge.training.distributed import destroy_distributed

        destroy_distributed()


def get_all(refs: Sequence[Any], timeout_s: float | None = None) -> list[Any]:
    """ray.get of every ref, failing on the FIRST error instead of waiting for the rest (ranks
    left in a collective by a dead peer would never answer)."""
    import ray

    pending = list(refs)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while pending:
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        done, pending = ray.wait(pending, num_returns=1, timeout=left)
        if not done:
            raise TimeoutError(f"{len(pending)} trainer calls still running after {timeout_s}s")
        ray.get(done)  # raises the rank's error now
    return ray.get(list(refs))


class TrainerGroup:
    """The driver's view of the trainer ranks (RLTrainer's interface, see the module docstring)."""

    def __init__(self, actors: list[Any], cfg: TrainRunConfig) -> None:
        self.actors, self.cfg = actors, cfg
        self.version = 0

    @staticmethod
    def create(cfg: TrainRunConfig, actor_options: list[dict[str, Any]], name: str) -> list[Any]:
        """The rank actors, one per options dict (not yet joined: see `setup`)."""
        import ray

        world = len(actor_options)
        remote = ray.remote(TrainerWorker)
        return [
            remote.options(**opts, name=f"{name}-trainer-{r}", max_restarts=0).remote(r, world)
            for r, opts in enumerate(actor_options)
        ]

    def setup(self) -> list[dict[str, Any]]:
        """Rendezvous (rank 0's node, a free port) and build the trainer on every rank."""
        import ray

        role = self.cfg.scale.trainer
        ips = get_all([a.node_ip.remote() for a in self.actors], role.setup_timeout_s)
        addr = role.master_addr or ("127.0.0.1" if len(set(ips)) == 1 else ips[0])
        port = role.master_port or ray.get(self.actors[0].free_port.remote())
        cfg_json = self.cfg.model_dump_json()
        infos = get_all(
            [a.setup.remote(cfg_json, addr, port) for a in self.actors], role.setup_timeout_s
        )
        log.info(
            "trainer group ready",
            extra={"fields": {"world": len(self.actors), "master": f"{addr}:{port}"}},
        )
        return infos

    @property
    def policy_version(self) -> int:
        return self.version

    def train_step(self, trajs: Sequence[Any]) -> Any:
        """Every rank gets the same global batch (one object-store copy); rank 0's metrics."""
        import ray

        ref = ray.put(list(trajs))
        metrics = get_all([a.train_step.remote(ref) for a in self.actors])[0]
        self.version = int(metrics.step)
        return metrics

    def state_dict(self) -> Any:
        """An ObjectRef to rank 0's full weights (not fetched here: workers resolve it)."""
        import ray

        refs = [a.state_dict.remote() for a in self.actors]
        get_all(refs[1:])  # the collective is done when every other rank has returned
        ray.wait(refs[:1], num_returns=1)
        return refs[0]

    def save_weights(self) -> str:
        return get_all([a.save_weights.remote() for a in self.actors])[0]

    def checkpoint(self, extra: dict[str, Any] | None = None) -> str:
        return get_all([a.checkpoint.remote(extra or {}) for a in self.actors])[0]

    def resume(self) -> dict[str, Any] | None:
        extra = get_all([a.resume.remote() for a in self.actors])[0]
        self.version = get_all([self.actors[0].policy_version.remote()])[0]
        return extra

    def should_checkpoint(self) -> bool:
        every = self.cfg.trainer.checkpoint.every_steps
        return every > 0 and self.version > 0 and self.version % every == 0

    def param_sum(self) -> float:
        return get_all([a.param_sum.remote() for a in self.actors])[0]

    def close(self, timeout_s: float = 30.0) -> None:
        try:
            get_all([a.close.remote() for a in self.actors], timeout_s)
        except Exception as exc:  # a dead rank: the driver kills the actors next anyway
            log.debug("trainer close: %s", exc)
