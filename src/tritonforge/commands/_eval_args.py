"""Shared command-line options for commands that evaluate candidates.

Covers: adding the evaluation flags to a parser (with `--preset`, `--eval-config`, `--set`,
`--print-config`, `--list-keys`) and turning them into an `EvalSettings` (preset, then config
file, then `--set` overrides, then explicit flags), and the reward a command shows beside a
verdict (`reward_of`: `--reward`, computed on the task side). Does not cover: checking the
settings (plan.runs.resolve_eval) or evaluating.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable

from pydantic import ValidationError

from tritonforge.commands._config_args import add_config_args
from tritonforge.config import ConfigError, describe_errors
from tritonforge.config.eval import PRESETS, EvalSettings, load_eval_settings
from tritonforge.types import Verdict


def add_eval_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device", choices=["auto", "cpu", "cuda"], help="where kernels run (default auto)"
    )
    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="rules to judge by: strict (default, ours), kernelbench (KernelBench's), tritonforge "
        "(the original release's); other flags and --set apply on top (docs/presets.md)",
    )
    p.add_argument(
        "--mode",
        choices=["strict", "hybrid"],
        help="strict: all compute in custom kernels (default)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="budget in seconds for each phase (import, compile, correctness, timing)",
    )
    p.add_argument("--trials", type=int, metavar="N", help="correctness trials (default 5)")
    p.add_argument(
        "--reward",
        help="reward shown beside the verdict (the task side's: rollout/rewards.py): tritonforge "
        "| tritonforge_compile | tritonforge_original | kevin | log_speedup; default: the one "
        "the preset's source used",
    )
    p.add_argument(
        "--backend",
        choices=["triton", "cuda"],
        help="cuda = CUDA C++ through load_inline (GPU only)",
    )
    p.add_argument("--sandbox", choices=["auto", "namespaces", "rlimits"])
    p.add_argument(
        "--compile-baseline", action="store_true", help="also time torch.compile(reference)"
    )
    add_config_args(p, EvalSettings, flag="--eval-config", example="perf_trials=100")


def reward_of(args: argparse.Namespace) -> Callable[[Verdict], float]:
    """The reward a judging command shows beside each verdict (`--reward`, else the preset's);
    PlanError for a name the task side does not know."""
    from tritonforge.plan.checks import check_reward
    from tritonforge.rollout.rewards import compute_reward

    name = getattr(args, "reward", None)
    check_reward("--reward", name)
    return functools.partial(compute_reward, name=name)


def settings_from_args(args: argparse.Namespace) -> EvalSettings:
    s = load_eval_settings(args.eval_config, args.set, getattr(args, "preset", None))
    flags = [
        ("device", "device"),
        ("mode", "mode"),
        ("trials", "correctness_trials"),
        ("backend", "backend"),
        ("sandbox", "sandbox"),
    ]
    for flag, field in flags:
        value = getattr(args, flag, None)
        if value is not None:
            _assign(s, field, value, flag)
    if args.compile_baseline:
        s.compile_baseline = True
    if args.timeout is not None:
        for name in ("import_s", "compile_s", "correctness_s", "timing_s"):
            _assign(s.budgets, name, args.timeout, "timeout")
    return s


def _assign(section: object, field: str, value: object, flag: str) -> None:
    try:
        setattr(section, field, value)
    except ValidationError as exc:
        why = describe_errors(type(section), exc)  # type: ignore[arg-type]
        raise ConfigError(f"--{flag} {value!r}: {why}") from None
