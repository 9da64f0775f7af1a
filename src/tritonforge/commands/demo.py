"""`tritonforge demo`: the main job on its embedded default, on a laptop CPU in minutes.

Makes the tiny model, SFTs it on built-in solutions (cold start), measures pass rate and mean
reward on the same problems, runs multi-turn GRPO against the sandboxed evaluator (Triton
interpreter), measures again with the same sampling seed, and writes RUN_DIR/report.html.
Everything is configurable (`--set sft.sft.max_steps=20`, `--set train.steps=4`, ...); the
resolved config is saved in the run dir. Learning is judged only from this run's numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from pydantic import Field

from tritonforge.config import Section, load_config, save_config
from tritonforge.config.run import TrainRunConfig
from tritonforge.config.train import SFTRunConfig

DEMO_PROBLEMS = ["relu", "leaky_relu", "sigmoid", "silu", "tanh", "hardtanh"]


def _default_sft() -> SFTRunConfig:
    cfg = SFTRunConfig()
    cfg.optim.lr = 2e-3
    cfg.sft.max_steps, cfg.sft.epochs, cfg.sft.batch_size = 44, 1000, 6
    cfg.sft.data.builtin_problems = list(DEMO_PROBLEMS)
    cfg.sft.data.prompt.include_example = False
    cfg.sft.data.thinking = "none"
    cfg.checkpoint.every_steps = 0
    return cfg


def _default_train() -> TrainRunConfig:
    cfg = TrainRunConfig(steps=16, problems_per_step=6)
    cfg.problems.ids = list(DEMO_PROBLEMS)
    cfg.task.prompt.include_example = False
    cfg.agent.max_turns = 2
    cfg.agent.sampling.max_new_tokens = 450
    cfg.agent.sampling.temperature = 0.7
    cfg.agent.max_context_tokens = 4096
    cfg.trainer.rl.temperature = 0.7
    cfg.trainer.optim.lr = 6e-5
    cfg.buffer.group_size = 4
    cfg.evaluate.samples = 8
    cfg.eval.settings.device = "cpu"
    cfg.eval.concurrency = 2
    cfg.trainer.checkpoint.every_steps = 4
    return cfg


class DemoConfig(Section):
    """The demo: where it writes, and the SFT and RL runs it chains."""

    run_dir: str = "runs/demo"
    sft: SFTRunConfig = Field(default_factory=_default_sft)
    train: TrainRunConfig = Field(default_factory=_default_train)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="tiny model -> SFT -> multi-turn GRPO -> report (CPU)", description=__doc__
    )
    p.add_argument("--config", help="DemoConfig TOML")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override, e.g. --set train.steps=4",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = load_config(DemoConfig, args.config, args.set, base=DemoConfig())
    root = Path(cfg.run_dir)
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    from tritonforge.rollout.tiny_model import ensure_tiny_model
    from tritonforge.training.loop import run_training
    from tritonforge.training.report import write_report
    from tritonforge.training.sft import run_sft

    print("[1/4] tiny model", file=sys.stderr)
    model_dir = ensure_tiny_model(root / "tiny-model")
    print("[2/4] SFT on built-in solutions", file=sys.stderr)
    cfg.sft.run_dir = str(root / "sft")
    cfg.sft.model.path = str(model_dir)
    sft = run_sft(cfg.sft)
    print(
        f"      SFT: {sft.steps} steps, final loss {sft.final_loss:.4f} -> {sft.model_dir}",
        file=sys.stderr,
    )
    print(
        "[3/4] multi-turn GRPO against the evaluator (before/after measured on the same problems)",
        file=sys.stderr,
    )
    cfg.train.run_dir = str(root / "rl")
    cfg.train.trainer.model.path = str(sft.model_dir)
    cfg.train.engine.model_path = str(sft.model_dir)
    save_config(cfg, root / "demo_config.json")
    summary = asyncio.run(run_training(cfg.train))
    print("[4/4] report", file=sys.stderr)
    report = write_report(cfg.train.run_dir)
    b, a = summary["before"]["overall"], summary["after"]["overall"]
    result = {
        "minutes": round((time.monotonic() - t0) / 60, 2),
        "sft_final_loss": sft.final_loss,
        "before": {"pass_rate": b["pass_rate"], "mean_reward": b["mean_reward"]},
        "after": {"pass_rate": a["pass_rate"], "mean_reward": a["mean_reward"]},
        "report": str(report),
    }
    (root / "demo_result.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"pass rate {b['pass_rate']:.3f} -> {a['pass_rate']:.3f}, mean reward {b['mean_reward']:.3f} -> {a['mean_reward']:.3f} (same problems, same seed; see {report})",
        file=sys.stderr,
    )
    print(json.dumps(result))
    return 0
