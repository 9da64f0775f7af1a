"""The RL driver end to end on CPU: tiny model, real evaluator, sync and async schedules, resume,
report, and the compare command.

Small on purpose (2 problems, groups of 2, short generations): it checks the loop's mechanics
(rollouts saved, one metrics line per step, weights pushed, before/after measured, checkpoint
resume continues from the saved step), not learning (the demo shows that).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tritonforge.cli import main as cli_main
from tritonforge.config import load_config
from tritonforge.config.run import TrainRunConfig
from tritonforge.jobs.loop import run_training
from tritonforge.jobs.report import write_report
from tritonforge.rollout.tiny_model import ensure_tiny_model

pytestmark = pytest.mark.slow


def _cfg(model: Path, run_dir: Path, steps: int, mode: str = "sync") -> TrainRunConfig:
    return load_config(
        TrainRunConfig,
        None,
        [
            f"run_dir={run_dir}",
            f"steps={steps}",
            "problems_per_step=2",
            "problems.ids=['relu', 'sigmoid']",
            f"engine.model_path={model}",
            f"trainer.model.path={model}",
            "task.prompt.include_example=false",
            "agent.max_turns=2",
            "agent.sampling.max_new_tokens=8",
            "buffer.group_size=2",
            "evaluate.samples=1",
            "eval.settings.device=cpu",
            "trainer.checkpoint.every_steps=1",
            "trainer.logging.progress=false",
            f"schedule.mode={mode}",
        ],
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return ensure_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_sync_loop_resume_and_report(tiny: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    summary = asyncio.run(run_training(_cfg(tiny, run, steps=2)))
    assert summary["policy_version"] == 2 and len(summary["history"]) == 2
    assert {"before", "after"} <= set(summary)
    assert summary["before"]["overall"]["episodes"] == 2.0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    assert all(abs(r["logprob_gap"]) < 1e-4 for r in rows)  # engine and trainer agree
    assert sorted(p.name for p in (run / "rollouts").iterdir()) == [
        "step_0000.jsonl",
        "step_0001.jsonl",
    ]
    # resume: a longer run in the same dir continues at step 2 and does one more step
    summary = asyncio.run(run_training(_cfg(tiny, run, steps=3)))
    assert summary["policy_version"] == 3
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    report = write_report(run)
    html = report.read_text()
    assert "Before and after RL" in html and "data:image/png;base64" in html


def test_async_schedule_tags_versions(tiny: Path, tmp_path: Path) -> None:
    run = tmp_path / "async"
    cfg = _cfg(tiny, run, steps=3, mode="async")
    cfg.evaluate.enabled = False
    summary = asyncio.run(run_training(cfg))
    assert summary["policy_version"] == 3
    groups = [
        json.loads(x)
        for f in sorted((run / "rollouts").iterdir())
        for x in f.read_text().splitlines()
    ]
    versions = {t["policy_version"] for g in groups for t in g["trajectories"]}
    assert versions <= {0, 1, 2} and 0 in versions
    for row in summary["history"]:
        assert row["staleness_max"] <= cfg.schedule.max_staleness


def test_compare_command_writes_one_report(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    args = [
        "compare",
        f"--set=run_dir={out}",
        "--set=variants={grpo = ['trainer.loss.type=grpo'], gspo = ['trainer.loss.type=gspo']}",
    ]
    base = [
        "steps=1",
        "problems_per_step=1",
        "problems.ids=['relu']",
        f"engine.model_path={tiny}",
        f"trainer.model.path={tiny}",
        "task.prompt.include_example=false",
        "agent.max_turns=1",
        "agent.sampling.max_new_tokens=8",
        "buffer.group_size=2",
        "evaluate.samples=1",
        "eval.settings.device=cpu",
        "trainer.logging.progress=false",
    ]
    args += [f"--set=base.{x}" for x in base]
    assert cli_main(args) == 0
    assert (out / "comparison.html").exists()
    assert (out / "grpo" / "summary.json").exists() and (out / "gspo" / "summary.json").exists()
