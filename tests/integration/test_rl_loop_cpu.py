"""The single-device RL loop of issue 33 on the CPU: engine, judge and trainer in one process on
one device, the async schedule with two rollouts in flight, weights copied to the engine between
decode steps; each step's split of wall time in its metrics row; and benchmarks/rl_loop.py's
small mode, whose JSON has the fields of the H200 run.

The policy is the tiny model after a short SFT on relu's solution, so that its answers hold code
the real evaluator judges (a random tiny model writes none, and the judge would never run).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers.loop_policy import LOOP_PROMPT, relu_policy
from tritonforge.config import load_config
from tritonforge.config.run import TrainRunConfig
from tritonforge.plan.runs import resolve_train
from tritonforge.training.assemble import build_pieces
from tritonforge.training.loop import drive
from tritonforge.training.report import write_report

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

REPO = Path(__file__).resolve().parents[2]
PARTS = ("generate_s", "judge_s", "judge_queue_s", "judge_correctness_s", "judge_timing_s",
         "train_s", "sync_s", "busy_s", "slowest_stage_s")  # fmt: skip


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return relu_policy(tmp_path_factory.mktemp("policy"))


def _loop_config(policy: Path, run_dir: Path) -> TrainRunConfig:
    return load_config(TrainRunConfig, None, [
        f"run_dir='{run_dir}'", "steps=2", "problems_per_step=1",
        "problems={suite = 'builtin', size = 'cpu', ids = ['relu']}",
        f"engine.model_path='{policy}'", f"trainer.model.path='{policy}'", *LOOP_PROMPT,
        "engine.pause_mode='keep'", "agent.max_turns=1", "agent.sampling.max_new_tokens=300",
        "buffer.group_size=2", "eval.settings.device='cpu'", "evaluate.enabled=false",
        "schedule.mode='async'", "schedule.max_staleness=1", "schedule.rollouts_in_flight=2",
        "trainer.loss.entropy_coef=0.01",  # a gradient every step, so the weights move
        "trainer.logging.progress=false", "trainer.checkpoint.save_final=false",
    ])  # fmt: skip


def test_async_loop_on_one_device_splits_each_step_and_serves_the_trainers_weights(
    policy: Path, tmp_path: Path
) -> None:
    plan = resolve_train(_loop_config(policy, tmp_path / "run"))

    async def run() -> tuple[dict, dict, dict, dict]:
        pieces = await build_pieces(plan)
        try:
            initial = {k: v.clone() for k, v in pieces.engine.model.state_dict().items()}
            summary = await drive(
                plan, pieces.trainer, pieces.agent, pieces.logger, pieces.accounting
            )
            served = dict(pieces.engine.model.state_dict())
            assert pieces.engine.policy_version == pieces.trainer.policy_version == 2
            return summary, initial, served, pieces.trainer.state_dict()
        finally:
            await pieces.aclose()

    summary, initial, served, trained = asyncio.run(run())
    rows = [json.loads(x) for x in (plan.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        for part in PARTS:
            assert 0.0 <= r[part] <= r["wall_s"] + 1e-6, (part, r)
        for part in ("judge_queue_s", "judge_correctness_s", "judge_timing_s"):
            assert r[part] <= r["judge_s"] + 1e-6
        assert r["idle_s"] >= 0.0 and r["idle_s"] == pytest.approx(r["wall_s"] - r["busy_s"])
        assert r["wall_over_slowest"] >= 1.0 - 1e-9 and r["host_rss_gib"] > 0
        assert r["judge_timing_s"] == 0.0 and "gpu_busy" not in r  # the CPU times nothing
    assert sum(r["verdicts"] for r in rows) > 0 and rows[0]["gen_tokens"] > 0
    # both steps' rollouts began under version 0: the second overlapped the first's judging
    assert rows[1]["staleness_max"] == 1.0
    acc = summary["accounting"]
    assert acc["gpu_busy_fraction"] is None and "no GPU" in acc["gpu_busy_reason"]
    assert acc["steps_counted"] == 1 and acc["step_over_slowest_stage"] >= 1.0
    # the engine serves exactly the trainer's weights, which moved
    assert served.keys() == trained.keys()
    assert all(torch.equal(served[k], trained[k]) for k in trained)
    assert any(not torch.equal(initial[k], trained[k]) for k in trained)
    html = write_report(plan.run_dir).read_text()
    assert "Where the time goes" in html and (plan.run_dir / "plots" / "split.png").exists()


def test_rl_loop_benchmark_small_mode_writes_the_h200_fields(policy: Path, tmp_path: Path) -> None:
    out = tmp_path / "rl_loop_small.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    script = str(REPO / "benchmarks" / "rl_loop.py")
    cmd = [sys.executable, script, "--small", "--tiny-policy", str(policy), "--out", str(out),
           "--work", str(tmp_path / "runs")]  # fmt: skip
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["mode"] == "small (CPU)" and doc["steps"] == 2 and len(doc["per_step"]) == 2
    assert doc["gpu_busy_fraction"] is None and doc["gpu_busy_reason"]
    assert doc["step_over_slowest_stage"] >= 1.0
    for key in ("pass_rate", "mean_reward"):
        assert set(doc[key]) == {"before", "after"}
        assert all(isinstance(v, float) for v in doc[key].values())
    for row in doc["per_step"]:
        assert {"wall_s", "generate_s", "judge_s", "judge_timing_s", "train_s", "sync_s",
                "idle_s", "verdicts_per_min"} <= set(row)  # fmt: skip
    assert set(doc["parts"]) == {"tiny", "shape"}
    shape = doc["parts"]["shape"]
    assert shape["steps"] == 1 and "offline_fallback tiny" in shape["policy"]["fallback"]
    # CPU figures never land where the H200 figures go
    refused = subprocess.run(
        [sys.executable, script, "--small", "--out", str(REPO / "docs/bench/h200_rl_loop.json")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2 and "outside docs/bench" in refused.stderr
