"""`tritonforge demo`: the main job on its embedded default, on a laptop CPU in minutes.

Makes the tiny model; SFTs it on the six elementwise built-in solutions, twelve re-spelled
versions of them (suite `variants`, split "sft") and repair episodes (each solution broken by
real mutations, every broken program judged by the evaluator, then its feedback and the fix);
then runs multi-turn GRPO against the sandboxed evaluator (Triton interpreter) on six prompts
the SFT data never showed (split "rl"), and measures pass@turn1, pass@turn2, repair rate and
mean reward before and after, with the same sampling seed, on those six, on the six SFT problems
and on six held-out spellings. Writes RUN_DIR/demo_result.json and RUN_DIR/rl/report.html.

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

from pydantic import Field

from tritonforge.config import Section, load_config, save_config, with_overrides
from tritonforge.config.rollout import ProblemsConfig
from tritonforge.config.run import TrainRunConfig
from tritonforge.config.train import OptimConfig, SFTDataConfig, SFTRunConfig

DEMO_PROBLEMS = ["relu", "leaky_relu", "sigmoid", "silu", "tanh", "hardtanh"]
SYSTEM_PROMPT = (
    "system_compact"  # the rules text of `system` is ~550 tokens a tiny model cannot use
)
REPAIR_MUTATIONS = ["kernel_name_mismatch", "other_kernel", "syntax_error", "mask_off_by_one"]


def _variants(split: str) -> ProblemsConfig:
    return ProblemsConfig(suite="variants", category=split)


def _sft_data(repair: bool) -> SFTDataConfig:
    """The demo's SFT pairs in the rollout format (with repair episodes when `repair`)."""
    data = SFTDataConfig(thinking="none", builtin_problems=list(DEMO_PROBLEMS))
    data.extra_problems = [_variants("sft")]
    if repair:
        data.repair.mutations = list(REPAIR_MUTATIONS)
        data.repair.per_problem = 2
    data.prompt.include_example = False
    data.prompt.system_template = SYSTEM_PROMPT
    return data


def _default_sft() -> SFTRunConfig:
    cfg = SFTRunConfig()
    cfg.optim = OptimConfig(
        lr=3e-3, schedule="linear", warmup_steps=3, total_steps=100, min_lr_ratio=0.05
    )
    cfg.sft.max_steps, cfg.sft.epochs, cfg.sft.batch_size = 100, 1000, 8
    cfg.sft.data = _sft_data(repair=True)
    cfg.checkpoint.every_steps = 0
    cfg.deterministic = True
    return cfg


def _default_train() -> TrainRunConfig:
    cfg = TrainRunConfig(steps=16, problems_per_step=6, deterministic=True)
    cfg.problems = _variants("rl")
    cfg.task.prompt.include_example = False
    cfg.task.prompt.system_template = SYSTEM_PROMPT
    cfg.agent.max_turns = 2
    cfg.agent.sampling.max_new_tokens = 400
    cfg.agent.sampling.temperature = 0.7
    cfg.agent.max_context_tokens = 2048
    cfg.engine.max_batch_size = 128
    cfg.trainer.rl.temperature = 0.7
    cfg.trainer.rl.max_logprob_drop = 0.1
    cfg.anchor = _sft_data(repair=False)  # the guard also keeps the SFT answers likely
    cfg.trainer.optim.lr = 6e-5
    cfg.buffer.group_size = 4
    cfg.evaluate.samples = 4
    cfg.evaluate.extra = {
        "sft_problems": ProblemsConfig(ids=list(DEMO_PROBLEMS)),
        "heldout": _variants("heldout"),
    }
    cfg.eval.settings.device = "cpu"
    cfg.eval.concurrency = 2
    cfg.eval.cache = True
    cfg.trainer.checkpoint.every_steps = 4
    return cfg


class DemoConfig(Section):
    """The demo: where it writes, its seed and threads, and the SFT and RL runs it chains."""

    run_dir: str = "runs/demo"
    seed: int = Field(0, description="sets every random source of the SFT and RL runs")
    seeds: list[int] = Field(
        default_factory=list, description="run the whole demo once per seed (RUN_DIR/seed_N)"
    )
    threads: int = Field(
        1, ge=1, description="torch threads; pinned so that runs repeat exactly (and one core "
        "stays free for the evaluator)"
    )  # fmt: skip
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


def seeded(cfg: DemoConfig, seed: int) -> DemoConfig:
    """`cfg` with every random source of its runs derived from `seed`."""
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
    from tritonforge.rollout.tiny_model import ensure_tiny_model
    from tritonforge.training.loop import run_training
    from tritonforge.training.report import write_report
    from tritonforge.training.reproducible import make_reproducible
    from tritonforge.training.sft import run_sft

    cfg = seeded(cfg, cfg.seed)
    root = Path(cfg.run_dir)
    root.mkdir(parents=True, exist_ok=True)
    t0, load0 = time.monotonic(), os.getloadavg()[0]
    make_reproducible(cfg.seed, cfg.threads)
    say("[1/4] tiny model")
    model_dir = ensure_tiny_model(root / "tiny-model")
    say("[2/4] SFT: built-in and re-spelled solutions, repair episodes judged by the evaluator")
    cfg.sft.run_dir = str(root / "sft")
    cfg.sft.model.path = str(model_dir)
    cfg.sft.sft.data.repair.cache_dir = str(root / "repair_cache")
    sft = run_sft(cfg.sft)
    say(f"      SFT: {sft.examples} examples, {sft.steps} steps, final loss {sft.final_loss:.4f}")
    say("[3/4] multi-turn GRPO on prompts SFT never showed (before/after on the same seeds)")
    cfg.train.run_dir = str(root / "rl")
    cfg.train.trainer.model.path = str(sft.model_dir)
    cfg.train.engine.model_path = str(sft.model_dir)
    save_config(cfg, root / "demo_config.json")
    summary = asyncio.run(run_training(cfg.train))
    say("[4/4] report")
    report = write_report(cfg.train.run_dir)
    sets = {
        name: {
            "before": _numbers(summary["before"]["sets"][name]),
            "after": _numbers(summary["after"]["sets"][name]),
        }
        for name in summary["before"].get("sets", {})
    }
    result = {
        "minutes": round((time.monotonic() - t0) / 60, 2),
        "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "seed": cfg.seed,
        "threads": cfg.threads,
        "sft_final_loss": sft.final_loss,
        "sft_examples": sft.examples,
        "before": _numbers(summary["before"]),
        "after": _numbers(summary["after"]),
        "sets": sets,
        "report": str(report),
    }
    (root / "demo_result.json").write_text(json.dumps(result, indent=2) + "\n")
    b, a = result["before"], result["after"]
    say(
        " | ".join(
            f"{k} {b[k]:.3f} -> {a[k]:.3f}" for k in ("pass_rate", "mean_reward", "repair_rate")
        )
        + f" (RL problems, same seeds; see {report})"
    )
    return result


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    cfg = load_config(DemoConfig, args.config, args.set, base=DemoConfig())
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
