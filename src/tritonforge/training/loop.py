"""The RL driver: rollouts -> buffer -> trainer update -> weights to the engine, repeated.

Covers: `run_training(cfg)` with the synchronous schedule (generate with the newest weights, then
train) and the asynchronous one (generation of the next batch overlaps training, and with
`rollouts_in_flight` > 1 the next step's episodes generate while this step's are judged; no
batch starts before the trainer is within `max_staleness` versions of it), weight pushes after
every update (in memory for the in-process engine: a tensor copy on its device; versioned HF
dirs otherwise), before/after measurement on fixed problems with the same sampling seed,
per-step rollouts saved, checkpoints with the driver's own state (step, RNG), each step's split
of wall time (training.accounting) in its metrics row, and the run summary. `run_training` takes
a checked `plan.TrainPlan` (a bare config is resolved first, so nothing loads before every name,
path and problem is known good), builds the pieces (`build_pieces`), then `drive` runs the job;
the Ray driver (tritonforge.scale.driver) calls `drive` with actor-backed pieces. The pieces are
typed by training.pieces' Protocols.
Does not cover: the pieces themselves (agent, buffer, trainer) or the HTML report.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from tritonforge.config.run import TrainRunConfig
from tritonforge.logging_setup import get_logger
from tritonforge.plan.runs import TrainPlan, resolve_train
from tritonforge.rollout.buffer import RolloutBuffer, save_groups
from tritonforge.rollout.engines.base import Engine
from tritonforge.rollout.runner import collect
from tritonforge.training.accounting import LoopAccounting, aggregate
from tritonforge.training.assemble import build_pieces
from tritonforge.training.episodes import episode_stats, speedup_geomean
from tritonforge.training.pieces import EpisodeRunner, MetricsSink, PolicyTrainer, StateDictEngine
from tritonforge.types import Group, Problem

log = get_logger("tritonforge.train")


async def measure(
    agent: EpisodeRunner,
    problems: list[Problem],
    samples: int,
    seed: int,
    temperature: float | None,
    tag: str,
    extra: dict[str, list[Problem]] | None = None,
) -> dict[str, Any]:
    """Play `samples` episodes per problem with a fixed seed; per-problem and overall stats
    (training.episodes), and the same for each named `extra` set under "sets". Every set is
    played in one batch, so a set's episodes get the same seeds whenever it is measured."""
    saved = agent.params
    update: dict[str, Any] = {"seed": seed}
    if temperature is not None:
        update["temperature"] = temperature
    agent.params = saved.model_copy(update=update)
    named = {"": problems, **(extra or {})}
    jobs = [
        (p, i, f"{tag}:{name}:{p.id}")
        for name, ps in named.items()
        for p in ps
        for i in range(samples)
    ]
    try:
        trajs = await agent.run(jobs)
    finally:
        agent.params = saved
    out: dict[str, Any] = {}
    for name, ps in named.items():
        mine = [
            t for t, job in zip(trajs, jobs, strict=True) if job[2].startswith(f"{tag}:{name}:")
        ]
        per = {p.id: episode_stats([t for t in mine if t.problem_id == p.id]) for p in ps}
        result = {"overall": episode_stats(mine), "per_problem": per}
        if name:
            out.setdefault("sets", {})[name] = result
        else:
            out.update(result)
    out["policy_version"] = agent.engine.policy_version
    return out


async def push_weights(engine: Engine, trainer: PolicyTrainer, mode: str) -> float:
    """Send the trainer's weights to the engine; returns seconds taken."""
    t0 = time.monotonic()
    version = trainer.policy_version
    in_memory = isinstance(engine, StateDictEngine)
    if in_memory and mode in ("state_dict", "auto"):
        ok = await engine.load_state_dict(trainer.state_dict(), version)
    else:
        path = await asyncio.to_thread(trainer.save_weights)
        ok = await engine.update_weights(str(path), version)
    if not ok:
        raise RuntimeError(f"the engine refused the weights of policy version {version}")
    return time.monotonic() - t0


class _Driver:
    def __init__(
        self,
        cfg: TrainRunConfig,
        trainer: PolicyTrainer,
        agent: EpisodeRunner,
        problems: list[Problem],
        logger: MetricsSink,
        run_dir: Path,
        accounting: LoopAccounting | None = None,
    ):
        self.cfg, self.trainer, self.agent, self.problems = cfg, trainer, agent, problems
        self.logger, self.run_dir, self.accounting = logger, run_dir, accounting
        self.rng = random.Random(cfg.seed)
        self.start_step = 0
        self.trained_steps = 0  # batches consumed by the trainer in this run (async gate)
        self.history: list[dict[str, float]] = []

    def _span(self, kind: str) -> AbstractContextManager[Any]:
        return self.accounting.span(kind) if self.accounting is not None else nullcontext()

    def _train(self, fresh: list[Any]) -> Any:
        """One update, holding the judge's device gate (shared) when it shares the GPU."""
        hold = self.accounting.share.hold() if self.accounting is not None else nullcontext()
        with hold:
            return self.trainer.train_step(fresh)

    def sample_batch(self) -> list[Problem]:
        return self.rng.sample(self.problems, min(self.cfg.problems_per_step, len(self.problems)))

    async def generate(
        self, step: int, batch: list[Problem] | None = None
    ) -> tuple[list[Group], dict[str, float], float]:
        batch = batch if batch is not None else self.sample_batch()
        buffer = RolloutBuffer(self.cfg.buffer)
        t0 = time.monotonic()
        await collect(
            self.agent,
            batch,
            self.cfg.buffer.group_size,
            buffer,
            desc=f"step {step} rollout",
            show=self.cfg.trainer.logging.progress,
        )
        groups = buffer.pop_groups()
        if self.cfg.save_rollouts and groups:
            save_groups(groups, self.run_dir / "rollouts" / f"step_{step:04d}.jsonl")
        return groups, buffer.stats(), time.monotonic() - t0

    async def train_on(
        self, step: int, groups: list[Group], stats: dict[str, float], gen_s: float
    ) -> None:
        trajs = [t for g in groups for t in g.trajectories]
        lag = self.cfg.schedule.max_staleness if self.cfg.schedule.mode == "async" else 0
        fresh = [t for t in trajs if self.trainer.policy_version - t.policy_version <= lag]
        row = {
            "reward": stats.get("reward_mean", 0.0),
            "pass": stats.get("pass_rate", 0.0),
            "zero_variance": stats.get("zero_variance_rate", 0.0),
            "fast_1": stats.get("fast_1", 0.0),
            "gen_s": gen_s,
            "stale_dropped": float(len(trajs) - len(fresh)),
        }
        for k, v in stats.items():
            if k.startswith("turn") or k.startswith("reward_turn"):
                row[k] = v
        episodes = episode_stats(trajs)
        row["pass_turn1"], row["repair"] = episodes["first_turn_pass"], episodes["repair_rate"]
        speedup = speedup_geomean(trajs)
        if speedup is not None:
            row["speedup"] = speedup
        if fresh:
            with self._span("train"):
                m = await asyncio.to_thread(self._train, fresh)
            stats_row = m.as_dict()
            stats_row["policy_version"] = stats_row.pop("step")  # the row's step is the driver's
            row.update(stats_row)
            with self._span("sync"):
                row["push_s"] = await push_weights(
                    self.agent.engine, self.trainer, self.cfg.weight_sync
                )
        else:
            log.warning("step %d: no trainable samples (all groups dropped or stale)", step)
        if self.accounting is not None:
            row.update(self.accounting.step_fields())
        self.history.append(row)
        self.logger.log(step, row)
        if self.trainer.should_checkpoint():
            self.trainer.checkpoint(extra={"driver_step": step + 1, "rng": self.rng.getstate()})

    async def run(self) -> None:
        steps = range(self.start_step, self.cfg.steps)
        if self.accounting is not None:
            self.accounting.start()
        if self.cfg.schedule.mode == "sync":
            for step in steps:
                groups, stats, gen_s = await self.generate(step)
                await self.train_on(step, groups, stats, gen_s)
            return
        sched = self.cfg.schedule
        queue: asyncio.Queue = asyncio.Queue(maxsize=sched.queue_batches)  # tasks, in step order
        slots = asyncio.Semaphore(sched.rollouts_in_flight)
        trained = asyncio.Condition()
        first, tasks = self.start_step, set()

        async def collect_one(step: int, batch: list[Problem]) -> tuple:
            try:
                return (step, *await self.generate(step, batch))
            finally:
                slots.release()

        async def produce() -> None:
            for step in steps:
                # bounded staleness by construction: batch k is generated only once the trainer
                # has finished batch k - 1 - max_staleness, so no sample arrives too old
                async with trained:
                    await trained.wait_for(
                        lambda s=step: s - first - self.trained_steps <= sched.max_staleness
                    )
                await slots.acquire()
                task = asyncio.create_task(collect_one(step, self.sample_batch()))
                tasks.add(task)
                await queue.put(task)

        producer = asyncio.create_task(produce())
        try:
            for _ in steps:
                task = await queue.get()
                step, groups, stats, gen_s = await task
                tasks.discard(task)
                await self.train_on(step, groups, stats, gen_s)
                async with trained:
                    self.trained_steps += 1
                    trained.notify_all()
        finally:
            producer.cancel()
            for task in tasks:
                task.cancel()


async def run_training(plan: TrainPlan | TrainRunConfig) -> dict[str, Any]:
    """Run the whole RL job in this process; returns (and writes) RUN_DIR/summary.json.

    The plan is checked before anything loads; only then are the tokenizer, engine, evaluator
    and trainer built and the run dir created."""
    if isinstance(plan, TrainRunConfig):
        plan = resolve_train(plan)
    pieces = await build_pieces(plan)
    try:
        return await drive(plan, pieces.trainer, pieces.agent, pieces.logger, pieces.accounting)
    finally:
        await pieces.aclose()


async def drive(
    plan: TrainPlan,
    trainer: PolicyTrainer,
    agent: EpisodeRunner,
    logger: MetricsSink,
    accounting: LoopAccounting | None = None,
) -> dict[str, Any]:
    """The job once its pieces exist: resume, measure before, the steps, measure after, summary.

    Shared by `run_training` (an RLTrainer and an Agent in this process, with `accounting`)
    and the Ray driver (tritonforge.scale.driver: a TrainerGroup and a RayAgent with the same
    interfaces; no accounting)."""
    cfg, run_dir = plan.config, plan.run_dir
    driver = _Driver(cfg, trainer, agent, plan.problems, logger, run_dir, accounting)
    resumed = trainer.resume() if cfg.trainer.checkpoint.resume else None
    summary_path = run_dir / "summary.json"
    summary: dict[str, Any] = (
        json.loads(summary_path.read_text()) if resumed and summary_path.exists() else {}
    )
    if resumed:
        driver.start_step = int(resumed.get("driver_step", trainer.policy_version))
        if "rng" in resumed:
            driver.rng.setstate(_as_rng_state(resumed["rng"]))
        await push_weights(agent.engine, trainer, cfg.weight_sync)
        log.info(
            "resumed at step %d (policy version %d)", driver.start_step, trainer.policy_version
        )
    ev = cfg.evaluate
    t0 = time.monotonic()

    async def measure_now(tag: str) -> dict[str, Any]:
        return await measure(
            agent, plan.eval_problems, ev.samples, ev.seed, ev.temperature, tag, plan.eval_sets
        )

    if ev.enabled and "before" not in summary:
        summary["before"] = await measure_now("before")
        write_summary(summary_path, summary)
    await driver.run()
    if ev.enabled:
        summary["after"] = await measure_now("after")
    summary.update(
        {
            "steps": cfg.steps,
            "policy_version": trainer.policy_version,
            "train_seconds": round(time.monotonic() - t0, 1),
            "history": summary.get("history", []) + driver.history,
            "policy": {
                "engine": cfg.engine.model_path,
                "trainer": cfg.trainer.model.path,
                "fallback": plan.fallback_note,
            },
        }
    )
    if accounting is not None:
        summary["accounting"] = {**accounting.summary(), **aggregate(driver.history)}
    if cfg.trainer.checkpoint.save_final:
        trainer.checkpoint(extra={"driver_step": cfg.steps, "rng": driver.rng.getstate()})
    write_summary(summary_path, summary)
    return summary


def _as_rng_state(state: Any) -> tuple:
    """random.getstate() survives JSON/pickle round trips as nested lists: make it tuples."""
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


def write_summary(path: Path, obj: dict[str, Any]) -> None:
    """Write a summary JSON atomically."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    tmp.replace(path)
