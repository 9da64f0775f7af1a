"""The RL loop on a local Ray cluster (CPU): 2 rollout workers, 2 evaluation actors, a 2-rank gloo
FSDP2 trainer, the tiny model and 3 built-in problems; actors killed mid-run lose no sample.

Generation is scripted (tests/helpers/ray_scripted.py: a random tiny model never writes code, so nothing would
reach the evaluators); weights, weight pushes, training, evaluation and Ray are real.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow

PROBLEMS = ["relu", "sigmoid", "tanh"]
ACTOR_ERRORS = {"ActorDiedError", "ActorUnavailableError", "RayActorError"}


@pytest.fixture(scope="module")
def scripted():
    """A local 4-CPU Ray cluster (started by the test, so runs must leave it up) and the helper."""
    from ray import cloudpickle

    from helpers import ray_scripted

    cloudpickle.register_pickle_by_value(ray_scripted)  # workers need not import tests/
    ray.init(num_cpus=4, include_dashboard=False, logging_level="WARNING", namespace="tf-test")
    yield ray_scripted
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tritonforge.rollout.tiny_model import ensure_tiny_model

    return str(ensure_tiny_model(tmp_path_factory.mktemp("tiny") / "model"))


def _config(run_dir: Path, tiny: str, name: str) -> Any:
    from tritonforge.config.run import TrainRunConfig

    return TrainRunConfig.model_validate(
        {
            "run_dir": str(run_dir),
            "steps": 2,
            "problems_per_step": 2,
            "trainer": {
                "model": {"path": tiny},
                "checkpoint": {"every_steps": 0, "save_final": True},
                "logging": {"progress": False},
                "batch": {"micro_batch_tokens": 2048},
            },
            "engine": {"type": "hf", "model_path": tiny},
            "task": {"prompt": {"include_example": False}},
            "agent": {"max_turns": 2, "sampling": {"max_new_tokens": 32}},
            "problems": {"suite": "builtin", "size": "cpu", "ids": PROBLEMS},
            "eval": {"settings": {"device": "cpu"}},
            "buffer": {"group_size": 2},
            "evaluate": {"enabled": True, "samples": 1},
            "scale": {
                "enabled": True,
                "name": name,
                "trainer": {"workers": 2, "cpus": 1},
                "rollout": {"workers": 2, "cpus": 0.5},
                "eval": {"actors": 2, "cpus": 0.5, "concurrency": 2, "down_s": 1.0},
            },
        }
    )


class Killer(threading.Thread):
    """Kills actor `target` (Ray restarts it) whenever `ready()` holds, until `done()` holds or
    `max_kills` kills were made (a kill can land just after the work it aimed at finished)."""

    def __init__(
        self,
        target: str,
        ready: Callable[[], bool],
        done: Callable[[], bool] = lambda: True,
        max_kills: int = 1,
    ) -> None:
        super().__init__(daemon=True)
        self.target, self.ready, self.done, self.max_kills = target, ready, done, max_kills
        self.kills = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set() and self.kills < self.max_kills:
            try:
                if self.ready():
                    ray.kill(ray.get_actor(self.target), no_restart=False)
                    self.kills += 1
                    time.sleep(3.0)  # let the callers notice (and the actor restart)
                    if self.done():
                        return
            except Exception:  # actors not created yet, or restarting
                pass
            time.sleep(0.05)


def _info(name: str) -> dict[str, Any]:
    return ray.get(ray.get_actor(name).info.remote(), timeout=5)


def _run(scripted: Any, cfg: Any, killer: Killer) -> dict[str, Any]:
    from tritonforge.problems import load_suite, select
    from tritonforge.scale.driver import run_training_ray

    problems = select(load_suite("builtin", size="cpu"), ids=PROBLEMS)
    bystander = ray.remote(scripted.Bystander).options(num_cpus=0).remote()  # must survive the run
    killer.start()
    t0 = time.monotonic()
    try:
        summary = asyncio.run(run_training_ray(cfg, engine_factory=scripted.make_factory(problems)))
    finally:
        killer.stop.set()
    summary["_wall_s"] = time.monotonic() - t0
    assert ray.get(bystander.ping.remote(), timeout=10) == "alive"
    ray.kill(bystander)
    return summary


def _check_common(summary: dict[str, Any], cfg: Any, name: str) -> dict[str, Any]:
    """The invariants of every run: no sample lost, weights in sync, only the run's things gone."""
    import torch

    assert summary["steps"] == 2 and summary["policy_version"] == 2
    # every requested trajectory is there, and every turn has a real verdict
    run = Path(cfg.run_dir)
    for step in range(2):
        lines = (run / "rollouts" / f"step_{step:04d}.jsonl").read_text().splitlines()
        groups = [json.loads(x) for x in lines]
        assert len(groups) == cfg.problems_per_step
        for g in groups:
            assert len(g["trajectories"]) == cfg.buffer.group_size
            for t in g["trajectories"]:
                assert t["turns"], t["status"]
                for turn in t["turns"]:
                    assert turn["code"] is not None
                    assert turn["verdict"] is not None
                    assert turn["verdict"]["status"] != "internal_error", turn["verdict"]
    scale = summary["scale"]
    workers = scale["rollout_workers"]
    for w in workers:
        assert w["eval"]["requests"] == w["eval"]["verdicts"], w  # each request answered once
        assert w["eval"]["failed"] == 0, w
        assert set(w["eval"]["errors"]) <= ACTOR_ERRORS, w
    # weights: every worker serves the trainer's final weights (version 2, same checksum)
    ckpt = torch.load(run / "checkpoints" / "step_00000002" / "state.pt", weights_only=False)
    trained = sum(
        v.double().abs().sum().item() for k, v in ckpt["model"].items() if k.startswith("lm.")
    )
    for w in workers:
        assert w["policy_version"] == 2, w
        assert w["param_sum"] == pytest.approx(trained, rel=1e-9), w
    # clean shutdown: none of the run's named actors or placement groups remain
    deadline = time.monotonic() + 10
    while [n for n in ray.util.list_named_actors() if n.startswith(name)]:
        assert time.monotonic() < deadline, ray.util.list_named_actors()
        time.sleep(0.2)
    pgs = ray.util.placement_group_table().values()
    assert all(p["state"] == "REMOVED" for p in pgs if p["name"].startswith(name))
    return scale


def test_eval_actor_killed_mid_run_loses_no_sample(
    scripted: Any, tiny: str, tmp_path: Path
) -> None:
    name = "t-eval"
    cfg = _config(tmp_path / "run", tiny, name)

    def ready() -> bool:  # evaluation actor 0 is judging right now
        return _info(f"{name}-eval-0")["inflight"] > 0

    def done() -> bool:  # some rollout worker saw the death and re-sent its request
        return sum(_info(f"{name}-rollout-{i}")["eval"]["requeued"] for i in range(2)) > 0

    killer = Killer(f"{name}-eval-0", ready, done, max_kills=4)
    summary = _run(scripted, cfg, killer)
    assert killer.kills >= 1, "evaluation actor 0 was never seen busy"
    scale = _check_common(summary, cfg, name)
    assert scale["eval"]["requeued"] >= 1, scale["eval"]  # requests on the dead actor re-sent
    print(f"\neval-kill run: {summary['_wall_s']:.1f}s, {killer.kills} kill(s), {scale['eval']}")


def test_rollout_worker_killed_mid_run_is_resynced(
    scripted: Any, tiny: str, tmp_path: Path
) -> None:
    name = "t-roll"
    cfg = _config(tmp_path / "run", tiny, name)

    def ready() -> bool:  # worker 1 has just started playing step 1's episodes (policy v1)
        info = _info(f"{name}-rollout-1")
        return info["policy_version"] == 1 and info["busy"] > 0 and info["busy_s"] < 0.3

    killer = Killer(f"{name}-rollout-1", ready)
    summary = _run(scripted, cfg, killer)
    assert killer.kills == 1, "rollout worker 1 was never seen starting a chunk at v1"
    scale = _check_common(summary, cfg, name)  # incl. the restarted worker serving v2's weights
    assert scale["rollout_chunks_retried"] >= 1
    assert scale["rollout_resynced"] >= 1  # the restarted worker was given the newest weights
    print(
        f"\nrollout-kill run: {summary['_wall_s']:.1f}s, chunks retried {scale['rollout_chunks_retried']}"
    )


def test_engine_server_actor_starts_and_stops(scripted: Any, tmp_path: Path) -> None:
    """A server actor runs its command on a free port, reports healthy, and stop() ends it."""
    import httpx

    from tritonforge.config.scale import ServerRole
    from tritonforge.scale.servers import EngineServer

    role = ServerRole(
        count=1,
        gpus=0,
        cpus=0.1,
        host="127.0.0.1",
        command=[sys.executable, "-m", "http.server", "{port}", "--bind", "{host}"],
        health_path="/",
        startup_timeout_s=60,
    )
    actor = (
        ray.remote(EngineServer)
        .options(num_cpus=0.1)
        .remote(role.model_dump_json(), "unused", 0, str(tmp_path))
    )
    info = ray.get(actor.wait_ready.remote(), timeout=90)
    assert info["url"].startswith("http://127.0.0.1:")
    assert httpx.get(info["url"] + "/", timeout=5).status_code == 200
    assert ray.get(actor.alive.remote()) is True
    code = ray.get(actor.stop.remote(2.0), timeout=30)
    assert code is not None
    assert ray.get(actor.alive.remote()) is False
    ray.kill(actor)
