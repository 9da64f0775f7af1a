"""The RL driver on Ray: the single-machine loop (training.loop.drive) over actor-backed pieces.

Covers: `run_training_ray(cfg)`: connect to (or start) a Ray cluster, place the actors
(scale.placement), start inference servers if configured, evaluation actors, the trainer group
and the rollout workers, then run `training.loop.drive` with a `TrainerGroup` as the trainer and
a `RayAgent` as the agent (same steps, schedule, buffer, measurement, checkpoints and summary as
`run_training`), add a `scale` report (per-worker versions and episodes, evaluation requeues) to
the summary, and shut down exactly what it started: its actors, its placement groups, and the
Ray cluster only if it started it. `absolute_paths` resolves local relative paths before the
config travels to actors that may run elsewhere.
Does not cover: the actor classes (scale.actors, scale.trainer_group, scale.servers) or the loop
logic itself (training.loop).
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonforge.config.run import TrainRunConfig
from tritonforge.logging_setup import get_logger
from tritonforge.plan.runs import TrainPlan, resolve_train
from tritonforge.scale.actors import EngineFactory, EvalWorker, RolloutWorker
from tritonforge.scale.placement import PlacementPlan, Placements, plan_placement
from tritonforge.scale.rollout_pool import InMemoryPoolEngine, PoolEngine, RayAgent, RolloutPool
from tritonforge.scale.trainer_group import TrainerGroup, get_all

__all__ = ["absolute_paths", "run_training_ray"]

log = get_logger("tritonforge.scale")


def absolute_paths(cfg: TrainRunConfig) -> TrainRunConfig:
    """A copy whose run dir and local model/data paths are absolute (hub ids stay as they are);
    builds the tiny model first when a default tiny-model path is used."""
    from tritonforge.rollout.tiny_model import DEFAULT_TINY_MODEL_DIR, ensure_tiny_model

    cfg = cfg.model_copy(deep=True)
    if DEFAULT_TINY_MODEL_DIR in (Path(cfg.engine.model_path), Path(cfg.trainer.model.path)):
        ensure_tiny_model(DEFAULT_TINY_MODEL_DIR)

    def fix(p: str | None) -> str | None:
        return str(Path(p).resolve()) if p and Path(p).exists() else p

    cfg.run_dir = str(Path(cfg.run_dir).resolve())
    m = cfg.trainer.model
    m.path = fix(m.path) or m.path
    m.tokenizer_path, m.reference_path = fix(m.tokenizer_path), fix(m.reference_path)
    cfg.engine.model_path = fix(cfg.engine.model_path) or cfg.engine.model_path
    cfg.problems.source = fix(cfg.problems.source)
    if cfg.evaluate.problems is not None:
        cfg.evaluate.problems.source = fix(cfg.evaluate.problems.source)
    return cfg


@dataclass
class _Started:
    """Everything this run created, for a shutdown that stops only that."""

    cluster: bool = False
    placements: Placements | None = None
    servers: list[Any] = field(default_factory=list)
    evals: list[Any] = field(default_factory=list)
    trainers: list[Any] = field(default_factory=list)
    workers: list[Any] = field(default_factory=list)
    group: TrainerGroup | None = None
    pool: RolloutPool | None = None


def _connect(cfg: TrainRunConfig) -> bool:
    """Join the configured cluster or start a local one; True if this call started it."""
    import ray

    sc = cfg.scale
    if ray.is_initialized():
        return False
    if sc.address:
        ray.init(address=sc.address, namespace=sc.namespace)
        return False
    ray.init(
        num_cpus=sc.num_cpus, num_gpus=sc.num_gpus, namespace=sc.namespace, include_dashboard=False
    )
    return True


def _start_servers(cfg: TrainRunConfig, pl: Placements, name: str, st: _Started) -> list[str]:
    import ray

    from tritonforge.scale.servers import EngineServer

    role = cfg.scale.servers
    if role.count == 0:
        return []
    remote = ray.remote(EngineServer)
    model = role.model or cfg.engine.model_path
    logs = str(Path(cfg.run_dir) / "servers")
    for i, slot in enumerate(pl.plan.slots["servers"]):
        opts = pl.options(slot)
        actor = remote.options(**opts, name=f"{name}-server-{i}", max_restarts=0)
        st.servers.append(actor.remote(role.model_dump_json(), model, i, logs))
    infos = get_all([s.wait_ready.remote() for s in st.servers], role.startup_timeout_s + 60)
    return [info["url"] for info in infos]


def _start_evals(cfg: TrainRunConfig, pl: Placements, name: str, st: _Started) -> None:
    import ray

    e = cfg.scale.eval
    remote = ray.remote(EvalWorker)
    settings = cfg.eval.settings.model_dump_json()
    for i, slot in enumerate(pl.plan.slots.get("eval", [])):
        actor = remote.options(
            **pl.options(slot),
            name=f"{name}-eval-{i}",
            max_restarts=e.max_restarts,
            max_task_retries=0,  # the backend requeues, on another actor when it can
            max_concurrency=e.concurrency + 2,  # + info() while evaluations run
        )
        st.evals.append(actor.remote(settings, i))


def _start_workers(
    cfg: TrainRunConfig,
    pl: Placements,
    name: str,
    st: _Started,
    urls: list[str],
    factory: EngineFactory | None,
) -> None:
    import ray

    r = cfg.scale.rollout
    remote = ray.remote(RolloutWorker)
    cfg_json = cfg.model_dump_json()
    # eval actors by name (handles as constructor arguments would sit in the object store, where
    # Ray cannot guarantee them for a restart)
    evals = [f"{name}-eval-{i}" for i in range(len(st.evals))]
    for i, slot in enumerate(pl.plan.slots["rollout"]):
        actor = remote.options(
            **pl.options(slot), name=f"{name}-rollout-{i}", max_restarts=r.max_restarts
        )
        st.workers.append(actor.remote(cfg_json, i, evals, urls or None, factory))


async def _report(pool: RolloutPool, st: _Started, timeout_s: float) -> dict[str, Any]:
    await pool.settle(timeout_s)
    workers = await pool.info()
    evals = []
    for i, a in enumerate(st.evals):
        try:
            evals.append(await a.info.remote())
        except Exception as exc:  # a dead actor is part of the report, not a failure
            evals.append({"index": i, "error": type(exc).__name__})
    counters = [w.get("eval", {}) for w in workers]
    total = {
        k: sum(int(c.get(k, 0)) for c in counters)
        for k in ("requests", "verdicts", "requeued", "rejudged", "failed")
    }
    return {
        "rollout_workers": workers,
        "eval_actors": evals,
        "eval": total,
        "rollout_chunks_retried": pool.retried_chunks,
        "rollout_resynced": pool.resynced,
    }


async def run_training_ray(
    plan: TrainPlan | TrainRunConfig, engine_factory: EngineFactory | None = None
) -> dict[str, Any]:
    """Run the RL job on Ray; returns (and writes) RUN_DIR/summary.json with a `scale` report.

    A bare config is resolved into a plan first (nothing starts before it checks out).
    `engine_factory(EngineConfig) -> Engine` replaces `build_engine` in the rollout workers
    (an extension point; tests use a scripted engine). It travels to the workers by pickle."""
    from tritonforge.training.assemble import open_run
    from tritonforge.training.loop import drive, write_summary

    if isinstance(plan, TrainRunConfig):
        plan = resolve_train(plan, ray=True)
    plan = plan.with_config(absolute_paths(plan.config))
    cfg = plan.config
    name = cfg.scale.name or f"tf-{secrets.token_hex(4)}"
    placement: PlacementPlan = plan_placement(cfg.scale)
    st = _Started(cluster=_connect(cfg))
    try:
        st.placements = pl = Placements(placement, name)
        await asyncio.to_thread(pl.wait, cfg.scale.placement_timeout_s)
        urls = await asyncio.to_thread(_start_servers, cfg, pl, name, st)
        _start_evals(cfg, pl, name, st)
        opts = [pl.options(s) for s in placement.slots["trainer"]]
        st.trainers = TrainerGroup.create(cfg, opts, name)
        st.group = group = TrainerGroup(st.trainers, cfg)
        _start_workers(cfg, pl, name, st, urls, engine_factory)
        await asyncio.to_thread(group.setup)
        st.pool = pool = RolloutPool(st.workers, cfg.scale.rollout)
        engine = (InMemoryPoolEngine if cfg.engine.type == "hf" else PoolEngine)(pool)
        agent = RayAgent(pool, engine, await pool.params())
        run_dir, logger = open_run(plan)
        try:
            summary = await drive(plan, group, agent, logger)
        finally:
            logger.close()
        report = await _report(pool, st, cfg.scale.rollout.resync_timeout_s)
        summary["scale"] = {"name": name, **report}
        write_summary(run_dir / "summary.json", summary)
        return summary
    finally:
        if st.pool is not None:
            st.pool.close()
        await asyncio.to_thread(_shutdown, st)


def _shutdown(st: _Started, grace_s: float = 30.0) -> None:
    """Close politely (bounded), then kill this run's actors, remove its placement groups, and
    stop Ray only if this run started it."""
    import ray

    polite = [w.close.remote() for w in st.workers] + [e.close.remote() for e in st.evals]
    polite += [s.stop.remote() for s in st.servers]
    if st.group is not None:
        st.group.close(grace_s)
    if polite:
        ray.wait(polite, num_returns=len(polite), timeout=grace_s)
    for actor in st.workers + st.evals + st.trainers + st.servers:
        try:
            ray.kill(actor, no_restart=True)
        except Exception as exc:  # already dead
            log.debug("kill: %s", exc)
    if st.placements is not None:
        st.placements.remove()
    if st.cluster:
        ray.shutdown()
    log.info(
        "scale-out run stopped",
        extra={"fields": {"actors": len(st.workers + st.evals + st.trainers + st.servers)}},
    )
