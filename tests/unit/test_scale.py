"""The scale-out layer without Ray: the evaluation backend's requeue logic with fake actors that
die, the rollout pool's chunking/re-send/re-sync with fake workers, placement plans, per-worker
engine sections."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tritonforge.config.engine import HFEngineConfig, SGLangEngineConfig, VLLMEngineConfig
from tritonforge.config.eval import EvalSettings
from tritonforge.config.scale import RolloutRole, ScaleConfig
from tritonforge.rollout.engines.base import SamplingParams
from tritonforge.scale.actors import placed_settings, worker_engine_config
from tritonforge.scale.backend import ActorEvalBackend
from tritonforge.scale.placement import plan_placement
from tritonforge.scale.rollout_pool import InMemoryPoolEngine, RayAgent, RolloutPool, split_jobs
from tritonforge.types import Problem, Status, Trajectory, Verdict


class Died(Exception):
    """Stands for ray.exceptions.RayActorError."""


class _Method:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args: Any):
        return self.fn(*args)


def _problem(pid: str = "builtin/relu") -> Problem:
    return Problem(id=pid, suite="builtin", name=pid.split("/")[-1], reference_src="x = 1\n")


class FakeEvalActor:
    """Answers CORRECT after `delay`; raises Died for its first `die` calls."""

    def __init__(self, name: str, die: int = 0, delay: float = 0.0) -> None:
        self.name, self.die, self.delay = name, die, delay
        self.calls: list[str] = []
        self.evaluate = _Method(self._evaluate)

    async def _evaluate(self, problem_json: str, source: str, settings_json: str | None) -> str:
        self.calls.append(source)
        await asyncio.sleep(self.delay)
        if self.die > 0:
            self.die -= 1
            raise Died(f"{self.name} died")
        p = Problem.model_validate_json(problem_json)
        return Verdict(status=Status.CORRECT, problem_id=p.id, message=self.name).model_dump_json()


def test_dead_actor_request_is_requeued_on_the_other_actor() -> None:
    a, b = FakeEvalActor("a", die=1), FakeEvalActor("b")
    be = ActorEvalBackend([a, b], max_attempts=3, down_s=60.0, retry_errors=(Died,))
    v = asyncio.run(be.evaluate(_problem(), "src-1"))
    assert v.status is Status.CORRECT and v.message == "b"  # answered by the survivor
    assert a.calls == ["src-1"] and b.calls == ["src-1"]  # sent once to each, in that order
    st = be.stats()
    assert (st["requests"], st["verdicts"], st["requeued"], st["failed"]) == (1, 1, 1, 0)
    assert st["errors"] == {"Died": 1}
    # a is down for 60 s: the next requests all go to b, even with b busier
    asyncio.run(be.evaluate(_problem(), "src-2"))
    assert a.calls == ["src-1"] and b.calls == ["src-1", "src-2"]


def test_no_sample_lost_when_an_actor_dies_under_load() -> None:
    """40 concurrent requests over 2 actors, one dies on its first 3 calls: 40 verdicts, 3 requeues."""
    a, b = FakeEvalActor("a", die=3, delay=0.01), FakeEvalActor("b", delay=0.01)
    be = ActorEvalBackend([a, b], max_attempts=4, down_s=0.0, retry_errors=(Died,))

    async def main() -> list[Verdict]:
        return await asyncio.gather(*(be.evaluate(_problem(), f"s{i}") for i in range(40)))

    verdicts = asyncio.run(main())
    assert [v.status for v in verdicts] == [Status.CORRECT] * 40
    st = be.stats()
    assert (st["requests"], st["verdicts"], st["requeued"], st["failed"]) == (40, 40, 3, 0)
    assert len(a.calls) + len(b.calls) == 43  # 40 requests + 3 re-sends
    assert sorted(set(a.calls) | set(b.calls)) == sorted(f"s{i}" for i in range(40))
    assert all(s["outstanding"] == 0 for s in st["actors"])


def test_least_outstanding_spreads_concurrent_requests() -> None:
    actors = [FakeEvalActor(n, delay=0.05) for n in "abc"]
    be = ActorEvalBackend(actors, retry_errors=(Died,))

    async def main() -> None:
        await asyncio.gather(*(be.evaluate(_problem(), f"s{i}") for i in range(9)))

    asyncio.run(main())
    assert [len(x.calls) for x in actors] == [3, 3, 3]


def test_bounded_retries_end_in_an_internal_error_verdict() -> None:
    a = FakeEvalActor("a", die=100)
    be = ActorEvalBackend([a], max_attempts=3, down_s=0.0, retry_errors=(Died,))
    v = asyncio.run(be.evaluate(_problem(), "src"))
    assert v.status is Status.INTERNAL_ERROR and "3 actor tries" in v.message
    assert len(a.calls) == 3
    st = be.stats()
    assert (st["requeued"], st["failed"], st["verdicts"]) == (2, 1, 0)


def test_a_non_transient_actor_error_is_not_resent() -> None:
    class Broken(FakeEvalActor):
        async def _evaluate(self, *args: Any) -> str:
            self.calls.append("x")
            raise ValueError("bug in the actor")

    a, b = Broken("a"), FakeEvalActor("b")
    be = ActorEvalBackend([a, b], retry_errors=(Died,))
    v = asyncio.run(be.evaluate(_problem(), "src"))
    assert v.status is Status.INTERNAL_ERROR and "bug in the actor" in v.message
    assert b.calls == []


def test_internal_error_verdict_is_rejudged_once_on_another_actor() -> None:
    class Sick(FakeEvalActor):  # a judge failure (e.g. its fork server was killed)
        async def _evaluate(self, problem_json: str, source: str, settings_json: Any) -> str:
            self.calls.append(source)
            p = Problem.model_validate_json(problem_json)
            return Verdict(
                status=Status.INTERNAL_ERROR, problem_id=p.id, message="judge failure"
            ).model_dump_json()

    a, b = Sick("a"), FakeEvalActor("b")
    be = ActorEvalBackend([a, b], retry_errors=(Died,))
    v = asyncio.run(be.evaluate(_problem(), "src"))
    assert v.status is Status.CORRECT and (a.calls, b.calls) == (["src"], ["src"])
    st = be.stats()
    assert (st["rejudged"], st["verdicts"], st["failed"]) == (1, 1, 0)
    # both sick: the second internal_error stands (one re-judge only)
    be2 = ActorEvalBackend([Sick("a"), Sick("b")], retry_errors=(Died,))
    v2 = asyncio.run(be2.evaluate(_problem(), "src"))
    assert v2.status is Status.INTERNAL_ERROR and v2.message == "judge failure"
    assert (be2.stats()["rejudged"], be2.stats()["verdicts"]) == (1, 1)


# ---------------------------------------------------------------- rollout pool


class FakeWorker:
    """Plays jobs into trajectories tagged with its weights version; its first `die` run calls
    fail, after which it is 'restarting' for `down_pushes` weight pushes, then back at v0."""

    def __init__(self, die: int = 0, down_pushes: int = 0) -> None:
        self.die, self.restart_pushes, self.down_pushes = die, down_pushes, 0
        self.version = 0
        self.seeds: list[int | None] = []
        self.run = _Method(self._run)
        self.load_state_dict = _Method(self._load)
        self.update_weights = _Method(self._load)
        self.info = _Method(self._info)

    async def _run(self, jobs: list, params_json: str) -> list[Trajectory]:
        if self.die > 0:
            self.die -= 1
            self.version = 0  # Ray restarts it with its initial weights
            self.down_pushes = self.restart_pushes
            raise Died("worker died")
        self.seeds.append(SamplingParams.model_validate_json(params_json).seed)
        return [
            Trajectory(
                problem_id=p.id,
                sample_index=i,
                group_id=g,
                policy_version=self.version,
                prompt_ids=[1],
                token_ids=[1],
                loss_mask=[0],
                rollout_logprobs=[0.0],
                turns=[],
            )
            for p, i, g in jobs
        ]

    async def _load(self, what: Any, version: int) -> bool:
        if self.down_pushes > 0:  # still restarting
            self.down_pushes -= 1
            raise Died("restarting")
        self.version = version
        return True

    async def _info(self, *a: Any) -> dict:
        return {"policy_version": self.version}


def test_split_jobs_is_contiguous_and_balanced() -> None:
    assert split_jobs(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert split_jobs(2, 4) == [(0, 1), (1, 2)]
    assert split_jobs(0, 2) == []


def test_pool_keeps_job_order_and_offsets_seeds() -> None:
    ws = [FakeWorker(), FakeWorker()]
    pool = RolloutPool(ws, RolloutRole(), errors=(Died,))
    agent = RayAgent(pool, InMemoryPoolEngine(pool), SamplingParams(seed=100))
    jobs = [(_problem(f"p/{k}"), k, f"g{k}") for k in range(5)]
    trajs = asyncio.run(agent.run(jobs))
    assert [t.sample_index for t in trajs] == [0, 1, 2, 3, 4]
    assert ws[0].seeds == [100] and ws[1].seeds == [103]  # job k sampled with seed 100 + k


def test_dead_worker_chunk_is_resent_and_the_worker_resynced_before_reuse() -> None:
    ws = [FakeWorker(), FakeWorker(die=1, down_pushes=2)]
    pool = RolloutPool(ws, RolloutRole(), errors=(Died,))
    engine = InMemoryPoolEngine(pool)
    agent = RayAgent(pool, engine, SamplingParams())
    jobs = [(_problem(f"p/{k}"), k, f"g{k}") for k in range(4)]

    async def main() -> tuple[list[Trajectory], list[Trajectory]]:
        assert await engine.load_state_dict("weights-v3", 3)
        first = await agent.run(jobs)  # worker 1 dies: its 2 jobs go to worker 0
        await pool.settle(30)  # re-sync: 2 failed pushes (restarting), then v3
        second = await agent.run(jobs)
        return first, second

    first, second = asyncio.run(main())
    assert [t.sample_index for t in first] == [0, 1, 2, 3]
    assert [t.policy_version for t in first] == [3, 3, 3, 3]  # never the restarted v0 weights
    assert pool.retried_chunks == 1 and pool.resynced == 1 and not pool.stale
    assert ws[1].version == 3
    assert [t.policy_version for t in second] == [3, 3, 3, 3]
    assert len(ws[1].seeds) == 1  # back in use after the re-sync


# ---------------------------------------------------------------- placement and config


def test_disaggregated_plan_gives_each_actor_its_own_bundle() -> None:
    cfg = ScaleConfig.model_validate(
        {
            "trainer": {"workers": 4, "cpus": 8, "gpus": 1},
            "rollout": {"workers": 2, "cpus": 4, "gpus": 1},
            "eval": {"actors": 2, "cpus": 6, "gpus": 1},
        }
    )
    plan = plan_placement(cfg)
    assert plan.bundles == {
        "train": [{"CPU": 8, "GPU": 1}] * 4,
        "infer": [{"CPU": 4, "GPU": 1}] * 2,
        "eval": [{"CPU": 6, "GPU": 1}] * 2,
    }
    assert plan.totals() == {"CPU": 52.0, "GPU": 8.0}
    assert [s.bundle for s in plan.slots["trainer"]] == [0, 1, 2, 3]
    assert plan.strategies == {"train": "PACK", "infer": "PACK", "eval": "SPREAD"}


def test_colocated_plan_shares_the_trainer_gpus() -> None:
    cfg = ScaleConfig.model_validate(
        {
            "colocate": True,
            "trainer": {"workers": 2, "cpus": 4, "gpus": 1},
            "rollout": {"workers": 4, "cpus": 1},
            "eval": {"actors": 1, "cpus": 2, "gpus": 1},
        }
    )
    plan = plan_placement(cfg)
    assert plan.bundles["colo"] == [{"CPU": 6, "GPU": 1}, {"CPU": 6, "GPU": 1}]  # 4 + 2 x 1 CPUs
    assert [(s.bundle, s.gpus) for s in plan.slots["trainer"]] == [(0, 0.5), (1, 0.5)]
    # rollout worker j -> bundle j % 2, the other half GPU split between its 2 workers
    assert [(s.bundle, s.gpus) for s in plan.slots["rollout"]] == [(0, 0.25), (1, 0.25)] * 2
    assert plan.bundles["eval"] == [{"CPU": 2, "GPU": 1}]  # evaluation never shares a GPU
    assert plan.totals() == {"CPU": 14.0, "GPU": 3.0}


def test_servers_take_the_inference_gpus_and_workers_become_cpu_clients() -> None:
    cfg = ScaleConfig.model_validate(
        {
            "servers": {"count": 2, "cpus": 4, "gpus": 1, "command": ["x"]},
            "rollout": {"workers": 2, "cpus": 1, "gpus": 1},
            "eval": {"actors": 0},
        }
    )
    plan = plan_placement(cfg)
    assert plan.bundles["infer"] == [{"CPU": 4, "GPU": 1}] * 2
    assert plan.bundles["rollout"] == [{"CPU": 1}] * 2
    assert "eval" not in plan.bundles


def test_worker_engine_sections_split_servers_and_seeds() -> None:
    e = VLLMEngineConfig(urls=["http://a", "http://b", "http://c"], seed=5)
    w0 = worker_engine_config(e, 0, 2, 1000, None)
    w1 = worker_engine_config(e, 1, 2, 1000, None)
    assert (w0.type, w0.backend, w0.urls, w0.seed) == (
        "balanced",
        "vllm",
        ["http://a", "http://c"],
        5,
    )
    assert (w1.type, w1.url, w1.seed) == ("vllm", "http://b", 1005)
    hf = worker_engine_config(HFEngineConfig(), 3, 4, 10, None)
    assert (hf.type, hf.seed) == ("hf", 30)
    with pytest.raises(ValueError, match="at least as many"):
        worker_engine_config(SGLangEngineConfig(), 0, 2, 1, None)


def test_eval_actor_owns_placement_settings() -> None:
    s = EvalSettings(device="auto", device_index=3)
    assert (
        placed_settings(s, ["7"]).device == "cuda" and placed_settings(s, ["7"]).device_index == 0
    )
    assert placed_settings(s, []) == s
