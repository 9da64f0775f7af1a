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

from tritonforge.commands._config_args import CONFIG_EPILOG, add_config_args, load_from_args
from tritonforge.config import save_config
from tritonforge.config.demo import DemoConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="tiny model -> SFT -> multi-turn GRPO -> report (CPU)",
        description=__doc__,
        epilog=CONFIG_EPILOG,
    )
    add_config_args(p, DemoConfig, base=DemoConfig, example="train.steps=4")
    p.set_defaults(func=run, config_fn=config_from_args)


def config_from_args(args: argparse.Namespace) -> DemoConfig:
    return load_from_args(args, DemoConfig, base=DemoConfig())


def run(args: argparse.Namespace) -> int:
    from tritonforge.plan.runs import resolve_demo

    plan = resolve_demo(config_from_args(args))
    cfg, root = plan.config, plan.root
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    from tritonforge.rollout.tiny_model import ensure_tiny_model
    from tritonforge.training.loop import run_training
    from tritonforge.training.report import write_report
    from tritonforge.training.sft import run_sft

    print("[1/4] tiny model", file=sys.stderr)
    ensure_tiny_model(plan.tiny_model)
    print("[2/4] SFT on built-in solutions", file=sys.stderr)
    sft = run_sft(plan.sft.config)
    print(
        f"      SFT: {sft.steps} steps, final loss {sft.final_loss:.4f} -> {sft.model_dir}",
        file=sys.stderr,
    )
    print(
        "[3/4] multi-turn GRPO against the evaluator (before/after measured on the same problems)",
        file=sys.stderr,
    )
    save_config(cfg, root / "demo_config.json")
    summary = asyncio.run(run_training(plan.train))
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
