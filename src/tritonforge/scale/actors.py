"""The Ray actor classes of the rollout side: evaluation workers and rollout workers.

Covers: `EvalWorker` (one per GPU or CPU slot: an `Evaluator` behind
`evaluate(problem_json, source, settings_json) -> verdict_json`, run as a threaded actor so
`concurrency` evaluations overlap and `info()` answers while they run) and `RolloutWorker` (an
async actor owning an engine, an evaluation backend and an `Agent`; `run(jobs, params_json)` plays
episodes exactly as the single-machine loop does; weight loads from a state dict or a saved dir).
`worker_engine_config` gives worker i its engine section (own seed, own slice of server URLs).
Does not cover: where actors go (scale.placement), dispatching to them (scale.rollout_pool,
scale.backend) or the trainer (scale.trainer_group). These are plain classes: the driver wraps
them with `ray.remote(...)`, so importing this module needs no Ray.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from tritonforge.config.eval import EvalSettings
from tritonforge.config.run import TrainRunConfig
from tritonforge.logging_setup import get_logger
from tritonforge.rollout.engines.base import Engine, EngineConfig, SamplingParams
from tritonforge.types import Problem, Trajectory

__all__ = ["EvalWorker", "RolloutWorker", "placed_settings", "worker_engine_config"]

log = get_logger(__name__)

# Fields an evaluation actor decides itself (as the HTTP server does): placement, hidden seeds,
# isolation. A request's values for them are ignored.
ACTOR_SIDE_SETTINGS = ("device", "device_index", "secret_seed", "sandbox")


def _gpu_ids() -> list[Any]:
    try:
        import ray

        return list(ray.get_gpu_ids()) if ray.is_initialized() else []
    except ImportError:
        return []


def placed_settings(settings: EvalSettings, gpu_ids: list[Any]) -> EvalSettings:
    """The actor's own settings: its Ray GPU (visible as cuda:0) when it has one, else as given."""
    if gpu_ids:
        return settings.model_copy(update={"device": "cuda", "device_index": 0})
    return settings


class EvalWorker:
    """An evaluator in an actor (see the module docstring)."""

    def __init__(self, settings_json: str, index: int = 0) -> None:
        from tritonforge.evaluation.judge.evaluator import Evaluator

        base = EvalSettings.model_validate_json(settings_json)
        self.settings = placed_settings(base, _gpu_ids())
        self.index = index
        self.evaluator = Evaluator(self.settings)
        self._lock = threading.Lock()
        self._inflight = 0
        self._done = 0
        self._started = time.time()
        log.info(
            "evaluation actor ready",
            extra={"fields": {"index": index, "pid": os.getpid(), "device": self.settings.device}},
        )

    def evaluate(self, problem_json: str, source: str, settings_json: str | None = None) -> str:
        """Verdict JSON of `source` on the problem; never raises for a bad candidate."""
        problem = Problem.model_validate_json(problem_json)
        settings = self.settings
        if settings_json:
            req = EvalSettings.model_validate_json(settings_json)
            own = {k: getattr(self.settings, k) for k in ACTOR_SIDE_SETTINGS}
            settings = req.model_copy(update=own)
        with self._lock:
            self._inflight += 1
        try:
            verdict = self.evaluator.evaluate(problem, source, settings)
        finally:
            with self._lock:
                self._inflight -= 1
                self._done += 1
        return verdict.model_dump_json()

    def info(self) -> dict[str, Any]:
        with self._lock:
            return {
                "index": self.index,
                "pid": os.getpid(),
                "inflight": self._inflight,
                "done": self._done,
                "device": self.settings.device,
                "up_s": round(time.time() - self._started, 1),
            }

    def close(self) -> None:
        self.evaluator.close()


def worker_engine_config(
    engine: EngineConfig, index: int, workers: int, seed_stride: int, urls: list[str] | None
) -> EngineConfig:
    """Worker `index`'s engine section: seed + index * stride, and for an engine of servers its
    own slice of the endpoints (`urls`, else the config's), so each server gets one weight push."""
    mine = engine.model_copy(update={"seed": engine.seed + index * seed_stride})
    if not engine.abilities.servers:
        return mine
    pool = list(urls) if urls else engine.endpoint_urls()
    if len(pool) < workers:
        raise ValueError(
            f"{workers} rollout workers need at least as many inference endpoints; "
            f"got {len(pool)} ({pool})"
        )
    return mine.for_endpoints(pool[index::workers])  # type: ignore[return-value]


EngineFactory = Callable[[EngineConfig], Engine]


class RolloutWorker:
    """Engine + evaluation backend + agent in an (async) actor."""

    def __init__(
        self,
        cfg_json: str,
        index: int,
        eval_actors: list[Any],  # handles, or names of actors in this namespace
        urls: list[str] | None = None,
        engine_factory: EngineFactory | None = None,
    ) -> None:
        from transformers import AutoTokenizer

        from tritonforge.rollout.engines.base import build_engine
        from tritonforge.rollout.runner import build_agent, build_eval_backend
        from tritonforge.scale.backend import ActorEvalBackend

        cfg = TrainRunConfig.model_validate_json(cfg_json)
        sc = cfg.scale
        self.index = index
        ecfg = worker_engine_config(
            cfg.engine, index, sc.rollout.workers, sc.rollout.seed_stride, urls
        )
        self.engine = (engine_factory or build_engine)(ecfg)
        if eval_actors and isinstance(eval_actors[0], str):  # names: looked up in this namespace
            import ray

            eval_actors = [ray.get_actor(n) for n in eval_actors]
        if eval_actors:
            e = sc.eval
            self.backend: Any = ActorEvalBackend(
                eval_actors,
                max_attempts=e.max_attempts,
                down_s=e.down_s,
                timeout_s=e.timeout_s,
                rejudge_internal=e.rejudge_internal,
            )
        else:
            self.backend = build_eval_backend(cfg.eval)
        model = cfg.trainer.model
        tokenizer = AutoTokenizer.from_pretrained(model.tokenizer_path or model.path)
        self.agent = build_agent(
            self.engine, tokenizer, cfg.task, cfg.agent, self.backend, cfg.eval
        )
        self.episodes = 0
        self.busy = 0  # run() calls in progress
        self._busy_since: float | None = None  # start of the current busy period
        log.info("rollout worker ready", extra={"fields": {"index": index, "pid": os.getpid()}})

    async def run(self, jobs: list[tuple[Problem, int, str]], params_json: str) -> list[Trajectory]:
        """One episode per (problem, sample_index, group_id) with these sampling params."""
        agent = copy.copy(self.agent)  # calls may overlap: params belong to the call
        agent.params = SamplingParams.model_validate_json(params_json)
        self.busy += 1
        if self._busy_since is None:
            self._busy_since = time.monotonic()
        try:
            trajs = await agent.run(jobs)
        finally:
            self.busy -= 1
            if self.busy == 0:
                self._busy_since = None
        self.episodes += len(trajs)
        return trajs

    def params_json(self) -> str:
        """The agent's default sampling params (stop tokens from the chat template)."""
        return self.agent.params.model_dump_json()

    async def load_state_dict(self, state_dict: dict[str, Any], version: int) -> bool:
        return bool(await self.engine.load_state_dict(state_dict, version))  # type: ignore[attr-defined]

    async def update_weights(self, path: str, version: int) -> bool:
        return bool(await self.engine.update_weights(path, version))

    async def info(self, checksum: bool = False) -> dict[str, Any]:
        """Policy version, episodes played, calls in progress, evaluation counters, and with
        `checksum` the sum of |w| over the engine's weights (engines exposing `.model`)."""
        out: dict[str, Any] = {
            "index": self.index,
            "pid": os.getpid(),
            "policy_version": self.engine.policy_version,
            "episodes": self.episodes,
            "busy": self.busy,
            "busy_s": 0.0 if self._busy_since is None else time.monotonic() - self._busy_since,
        }
        stats = getattr(self.backend, "stats", None)
        if stats is not None:
            out["eval"] = stats()
        model = getattr(self.engine, "model", None) if checksum else None
        if model is not None and hasattr(model, "parameters"):
            out["param_sum"] = float(
                sum(p.detach().double().abs().sum() for p in model.parameters())
            )
        return out

    async def close(self) -> None:
        await self.engine.aclose()
        await self.backend.aclose()
