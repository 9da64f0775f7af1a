"""The single-GPU RL loop (issue 33) on a CUDA device: engine, trainer and judge on one GPU.

The tiny model after a short SFT on relu (tests/helpers/loop_policy.py) writes relu kernels, the
judge checks and times them on the GPU, the async schedule overlaps the steps. Checks that the
engine and the trainer took the judge's device gate (no timed round overlapped their work: the
gate's listener sees every interval), that NVML sampled the device, and that the engine serves
the trainer's weights (a tensor copy on the device) after each step.
Run on the GPU machine: `pytest -m gpu tests/gpu/test_rl_loop_gpu.py`.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def _overlaps(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> bool:
    return any(x0 < y1 and y0 < x1 for x0, x1 in a for y0, y1 in b)


def test_loop_on_one_gpu_holds_the_gate_samples_nvml_and_syncs_weights(tmp_path: Path) -> None:
    from helpers.loop_policy import LOOP_PROMPT, relu_policy
    from tritonforge.config import load_config
    from tritonforge.config.run import TrainRunConfig
    from tritonforge.evaluation.judge.device_gate import gate
    from tritonforge.plan.runs import resolve_train
    from tritonforge.training.assemble import build_pieces
    from tritonforge.training.loop import drive

    policy = relu_policy(tmp_path / "policy")
    cfg = load_config(TrainRunConfig, Path(__file__).parents[2] / "configs" / "single-gpu.toml", [
        f"run_dir='{tmp_path / 'run'}'", "steps=2", "problems_per_step=1",
        "problems={suite = 'builtin', size = 'gpu', ids = ['relu']}",
        f"engine.model_path='{policy}'", f"trainer.model.path='{policy}'", *LOOP_PROMPT,
        "agent.max_turns=1", "agent.sampling.max_new_tokens=300", "buffer.group_size=2",
        "buffer.filter='none'", "evaluate.enabled=false", "trainer.model.compile='off'",
        "trainer.loss.entropy_coef=0.01", "trainer.optim.schedule='constant'",
        "trainer.logging.progress=false", "trainer.checkpoint.save_final=false",
    ])  # fmt: skip
    plan = resolve_train(cfg)
    seen: dict[str, list[tuple[float, float]]] = {"shared": [], "exclusive": []}
    listener = lambda kind, t0, t1: seen[kind].append((t0, t1))  # noqa: E731
    gate("cuda:0").listeners.append(listener)

    async def run() -> tuple[dict, bool, int]:
        pieces = await build_pieces(plan)
        try:
            summary = await drive(
                plan, pieces.trainer, pieces.agent, pieces.logger, pieces.accounting
            )
            served = pieces.engine.model.state_dict()
            same = all(torch.equal(served[k], v) for k, v in pieces.trainer.state_dict().items())
            return summary, same, pieces.accounting.share.holds
        finally:
            await pieces.aclose()

    try:
        summary, same, holds = asyncio.run(run())
    finally:
        gate("cuda:0").listeners.remove(listener)
    acc = summary["accounting"]
    print(json.dumps(acc, indent=1))
    assert same, "the engine does not serve the trainer's weights"
    assert acc["timing_gate"] == "cuda:0" and holds > 10  # each decode step and train step
    assert not _overlaps(seen["shared"], seen["exclusive"])
    assert acc["gpu_busy_source"], acc["gpu_busy_reason"]
    rows = [json.loads(x) for x in (plan.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("gpu_busy" in r for r in rows)  # windows shorter than a sample have none
    for r in rows:
        assert r["gpu_mem_peak_gib"] > 0 and 0.0 <= r.get("gpu_busy", 0.0) <= 1.0
        assert r["idle_s"] >= 0 and all(r[k] <= r["wall_s"] + 1e-6 for k in ("judge_s", "train_s"))
    assert sum(r["verdicts"] for r in rows) > 0
