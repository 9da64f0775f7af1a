"""`tritonforge demo`: the main job on its embedded default, on a laptop CPU in minutes.

Makes the tiny model; SFTs it on the six elementwise built-in solutions, re-spelled versions of
them (suite `variants`, split "sft") and repair episodes (each solution broken by real mutations,
every broken program judged by the evaluator, then its feedback and the fix); then runs
multi-turn GRPO against the sandboxed evaluator (Triton interpreter) on prompts the SFT data
never showed (split "rl"), and measures pass@turn1, pass@turn2, repair rate and mean reward
before and after, with the same sampling seed, on those, on the SFT problems and on held-out
spellings. Writes RUN_DIR/demo_result.json and RUN_DIR/rl/report.html.

One `seed` fixes every random source (SFT order, RL problem order and sampling, the evaluator's
hidden inputs, measurement sampling) and `threads` pins torch's threads, so a second run on the
same kind of machine gives the same numbers. `--set seeds=[0,1,2]` runs the whole demo once per
seed and writes RUN_DIR/seeds.json and RUN_DIR/seeds.md (mean, min, max over the seeds).
Everything is configurable (`--set sft.sft.max_steps=20`, `--set train.steps=4`, ...); the
resolved config is saved in the run dir. Learning is judged only from this run's numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from tritonforge.commands._config_args import CONFIG_EPILOG, add_config_args, load_from_args
from tritonforge.config import save_config, with_overrides
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


def seeded(cfg: DemoConfig, seed: int) -> DemoConfig:
    """`cfg` with every random source of its runs derived from `seed`, threads pinned."""
    return with_overrides(
        cfg,
        [
            f"seed={seed}",
            f"sft.sft.seed={seed}",
            f"train.seed={seed}",
            f"train.engine.seed={seed}",
            f"train.trainer.rl.seed={seed}",
            f"train.evaluate.seed={1234 + seed}",
            f"train.eval.settings.secret_seed={seed}",
            f"sft.threads={cfg.threads}",
            f"train.threads={cfg.threads}",
        ],
    )


def _numbers(result: dict[str, Any]) -> dict[str, float]:
    o = result["overall"]
    return {
        "pass_rate": o["pass_rate"],
        "mean_reward": o["mean_reward"],
        "repair_rate": o["repair_rate"],
        "pass_at_turn1": o["first_turn_pass"],
        "pass_at_turn2": o["pass_at_turn2"],
        "repair_attempts": o["repair_attempts"],
    }


def run_one(cfg: DemoConfig) -> dict[str, Any]:
    """The whole demo for `cfg.seed` in `cfg.run_dir`; returns (and writes) demo_result.json."""
    from tritonforge.plan.runs import resolve_demo

    plan = resolve_demo(seeded(cfg, cfg.seed))
    cfg, root = plan.config, plan.root
    root.mkdir(parents=True, exist_ok=True)
    t0, load0 = time.monotonic(), os.getloadavg()[0]
    from tritonforge.jobs.loop import run_training
    from tritonforge.jobs.report import write_report
    from tritonforge.jobs.sft import run_sft
    from tritonforge.rollout.tiny_model import ensure_tiny_model
    from tritonforge.training.reproducible import make_reproducible

    make_reproducible(cfg.seed, cfg.threads)
    say("[1/4] tiny model")
    ensure_tiny_model(plan.tiny_model)
    say("[2/4] SFT: built-in and re-spelled solutions, repair episodes judged by the evaluator")
    sft_cfg = plan.sft.config.model_copy(deep=True)
    sft_cfg.sft.data.repair.cache_dir = str(root / "repair_cache")
    sft = run_sft(sft_cfg)
    say(f"      SFT: {sft.examples} examples, {sft.steps} steps, final loss {sft.final_loss:.4f}")
    say("[3/4] multi-turn GRPO on prompts SFT never showed (before/after on the same seeds)")
    save_config(cfg, root / "demo_config.json")
    summary = asyncio.run(run_training(plan.train))
    say("[4/4] report")
    report = write_report(cfg.train.run_dir)
    result = {
        "minutes": round((time.monotonic() - t0) / 60, 2),
        "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "seed": cfg.seed,
        "threads": cfg.threads,
        "sft_final_loss": sft.final_loss,
        "sft_examples": sft.examples,
        "before": _numbers(summary["before"]),
        "after": _numbers(summary["after"]),
        "sets": {
            name: {"before": _numbers(before), "after": _numbers(summary["after"]["sets"][name])}
            for name, before in summary["before"].get("sets", {}).items()
        },
        "report": str(report),
    }
    (root / "demo_result.json").write_text(json.dumps(result, indent=2) + "\n")
    b, a = result["before"], result["after"]
    keys = ("pass_rate", "mean_reward", "repair_rate")
    say(
        " | ".join(f"{k} {b[k]:.3f} -> {a[k]:.3f}" for k in keys)
        + f" (RL problems, same seeds; see {report})"
    )
    return result


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    if not cfg.seeds:
        print(json.dumps(run_one(cfg)))
        return 0
    from tritonforge.commands.demo_seeds import write_seed_table

    results = []
    for seed in cfg.seeds:
        say(f"=== seed {seed}")
        one = with_overrides(cfg, [f"seed={seed}", f"run_dir={cfg.run_dir}/seed_{seed}"])
        results.append(run_one(one))
    print(json.dumps(write_seed_table(Path(cfg.run_dir), results)))
    return 0
