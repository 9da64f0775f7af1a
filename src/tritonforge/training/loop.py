"""The RL driver: rollouts -> buffer -> trainer update -> weights to the engine, repeated.

Covers: `run_training(cfg)` with the synchronous schedule (generate with the newest weights, then
train) and the asynchronous one (generation of the next batch overlaps training; samples more
than `max_staleness` policy versions old are dropped), weight pushes after every update (in
memory for the in-process engine, versioned HF dirs otherwise), before/after measurement on fixed
problems with the same sampling seed, per-step rollouts saved, checkpoints with the driver's own
state (step, RNG), and the run summary. `run_training` takes a checked `plan.TrainPlan` (a bare
config is resolved first, so nothing loads before every name, path and problem is known good),
builds the pieces, then `drive` runs the job; the Ray driver (tritonforge.scale.driver) calls
`drive` with actor-backed pieces. The pieces are typed by training.pieces' Protocols.
Does not cover: the pieces themselves (agent, buffer, trainer) or the HTML report.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

from tritonforge.config import save_config
from tritonforge.config.run import TrainRunConfig
from tritonforge.logging_setup import get_logger
from tritonforge.plan.runs import TrainPlan, resolve_train
from tritonforge.rollout.buffer import RolloutBuffer, save_groups
from tritonforge.rollout.engines.base import Engine, build_engine
from tritonforge.rollout.runner import build_agent, build_eval_backend, collect
from tritonforge.training.pieces import EpisodeRunner, MetricsSink, PolicyTrainer, StateDictEngine
from tritonforge.types import Group, Problem, Status, Trajectory

log = get_logger("tritonforge.train")


def episode_stats(trajs: list[Trajectory]) -> dict[str, float]:
    """Pass rate (any turn correct), first-turn pass rate and mean return over episodes."""
    valid = [t for t in trajs if t.turns]
    if not valid:
        return {
            "episodes": 0.0,
            "pass_rate": 0.0,
            "first_turn_pass": 0.0,
            "mean_reward": 0.0,
            "compiled_rate": 0.0,
        }

    def ok(turn) -> bool:
        return turn.verdict is not None and turn.verdict.status is Status.CORRECT

    return {
        "episodes": float(len(trajs)),
        "pass_rate": sum(any(ok(x) for x in t.turns) for t in valid) / len(trajs),
        "first_turn_pass": sum(ok(t.turns[0]) for t in valid) / len(trajs),
        "mean_reward": sum(t.turns[0].ret for t in valid) / len(trajs),
        "mean_best_turn_reward": sum(max(x.reward for x in t.turns) for t in valid) / len(trajs),
        "compiled_rate": sum(
            any(x.verdict is not None and x.verdict.compiled for x in t.turns) for t in valid
        )
        / len(trajs),
    }


async def measure(
    agent: EpisodeRunner,
    problems: list[Problem],
    samples: int,
    seed: int,
    temperature: float | None,
    tag: str,
) -> dict[str, Any]:
    """Play `samples` episodes per problem with a fixed seed; per-problem and overall stats."""
    saved = agent.params
    update: dict[str, Any] = {"seed": seed}
    if temperature is not None:
        update["temperature"] = temperature
    agent.params = saved.model_copy(update=update)
    try:
        trajs = await agent.run([(p, i, f"{tag}:{p.id}") for p in problems for i in range(samples)])
    finally:
        agent.params = saved
    per = {p.id: episode_stats([t for t in trajs if t.problem_id == p.id]) for p in problems}
    return {
        "overall": episode_stats(trajs),
        "per_problem": per,
        "policy_version": agent.engine.policy_version,
    }


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
    ):
        self.cfg, self.trainer, self.agent, self.problems = cfg, trainer, agent, problems
        self.logger, self.run_dir = logger, run_dir
        self.rng = random.Random(cfg.seed)
        self.start_step = 0
        self.trained_steps = 0  # batches consumed by the trainer in this run (async gate)
        self.history: list[dict[str, float]] = []

    async def generate(self, step: int) -> tuple[list[Group], dict[str, float], float]:
        k = min(self.cfg.problems_per_step, len(self.problems))
        batch = self.rng.sample(self.problems, k)
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
        if fresh:
            m = await asyncio.to_thread(self.trainer.train_step, fresh)
            stats_row = m.as_dict()
            stats_row["policy_version"] = stats_row.pop("step")  # the row's step is the driver's
            row.update(stats_row)
            row["push_s"] = await push_weights(
                self.agent.engine, self.trainer, self.cfg.weight_sync
            )
        else:
            log.warning("step %d: no trainable samples (all groups dropped or stale)", step)
        self.history.append(row)
        self.logger.log(step, row)
        if self.trainer.should_checkpoint():
            self.trainer.checkpoint(extra={"driver_step": step + 1, "rng": self.rng.getstate()})

    async def run(self) -> None:
        steps = range(self.start_step, self.cfg.steps)
        if self.cfg.schedule.mode == "sync":
            for step in steps:
                groups, stats, gen_s = await self.generate(step)
                await self.train_on(step, groups, stats, gen_s)
            return
        queue: asyncio.Queue = asyncio.Queue(maxsize=self.cfg.schedule.queue_batches)
        trained = asyncio.Condition()
        lag = self.cfg.schedule.max_staleness
        first = self.start_step

        async def produce() -> None:
            for step in steps:
                # bounded staleness by construction: batch k is generated only once the trainer
                # has finished batch k - 1 - max_staleness, so no sample arrives too old
                async with trained:
                    await trained.wait_for(lambda s=step: s - first - self.trained_steps <= lag)
                await queue.put((step, *await self.generate(step)))

        producer = asyncio.create_task(produce())
        try:
            for _ in steps:
                step, groups, stats, gen_s = await queue.get()
                await self.train_on(step, groups, stats, gen_s)
                async with trained:
                    self.trained_steps += 1
                    trained.notify_all()
        finally:
            producer.cancel()


async def run_training(plan: TrainPlan | TrainRunConfig) -> dict[str, Any]:
    """Run the whole RL job in this process; returns (and writes) RUN_DIR/summary.json.

    The plan is checked before anything loads; only then are the tokenizer, engine, evaluator
    and trainer built and the run dir created."""
    if isinstance(plan, TrainRunConfig):
        plan = resolve_train(plan)
    cfg = plan.config
    from transformers import AutoTokenizer

    from tritonforge.training.rl import RLTrainer

    _build_tiny_models(plan)
    tokenizer = AutoTokenizer.from_pretrained(plan.tokenizer.path)
    engine = build_engine(cfg.engine)
    backend = build_eval_backend(cfg.eval)
    run_dir, logger = open_run(plan)
    try:
        trainer = RLTrainer(cfg.trainer, tokenizer=tokenizer, run_dir=run_dir)
        agent = build_agent(engine, tokenizer, cfg.task, cfg.agent, backend, cfg.eval)
        return await drive(plan, trainer, agent, logger)
    finally:
        logger.close()
        await engine.aclose()
        await backend.aclose()


def _build_tiny_models(plan: TrainPlan) -> None:
    """The tiny model, where the plan uses it and it is not built yet."""
    refs = [plan.policy, plan.tokenizer, plan.episodes.engine_model]
    if any(ref.source == "tiny" for ref in refs):
        from tritonforge.rollout.tiny_model import ensure_tiny_model

        for ref in {r.path for r in refs if r.source == "tiny"}:
            ensure_tiny_model(ref)


def open_run(plan: TrainPlan) -> tuple[Path, MetricsSink]:
    """Create RUN_DIR, save the resolved config there, open the metrics logger."""
    from tritonforge.training.metrics import MetricsLogger

    cfg = plan.config
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, plan.run_dir / "config.json")
    return plan.run_dir, MetricsLogger(
        plan.run_dir, cfg.trainer.logging, run_config=cfg.model_dump(mode="json")
    )


async def drive(
    plan: TrainPlan, trainer: PolicyTrainer, agent: EpisodeRunner, logger: MetricsSink
) -> dict[str, Any]:
    """The job once its pieces exist: resume, measure before, the steps, measure after, summary.

    Shared by `run_training` (an RLTrainer and an Agent in this process) and the Ray driver
    (tritonforge.scale.driver: a TrainerGroup and a RayAgent with the same interfaces)."""
    cfg, run_dir = plan.config, plan.run_dir
    driver = _Driver(cfg, trainer, agent, plan.problems, logger, run_dir)
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
    if ev.enabled and "before" not in summary:
        summary["before"] = await measure(
            agent, plan.eval_problems, ev.samples, ev.seed, ev.temperature, "before"
        )
        write_summary(summary_path, summary)
    await driver.run()
    if ev.enabled:
        summary["after"] = await measure(
            agent, plan.eval_problems, ev.samples, ev.seed, ev.temperature, "after"
        )
    summary.update(
        {
            "steps": cfg.steps,
            "policy_version": trainer.policy_version,
            "train_seconds": round(time.monotonic() - t0, 1),
            "history": summary.get("history", []) + driver.history,
        }
    )
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
