"""`tritonforge bench-model --config ...`: KernelBench-style evaluation of a model or endpoint.

Plays k multi-turn episodes per problem with the configured engine (in-process model, vLLM or
SGLang endpoint) against the evaluator and reports pass@1 and pass@k (unbiased estimator),
fast_p per level (best correct sample per problem; missing = failure), the pass rate reached by
each turn (improvement from feedback), and the fault histogram; writes bench.json, bench.md and
bench.png to the output folder.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
from collections import Counter
from collections.abc import Callable
from math import comb
from pathlib import Path
from typing import Any

from tritonforge.commands._config_args import CONFIG_EPILOG, add_config_args, load_from_args
from tritonforge.config import save_config
from tritonforge.config.rollout import BenchConfig
from tritonforge.plan.runs import BenchPlan
from tritonforge.types import Problem, Status, Trajectory, Verdict


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench-model",
        help="pass@k, fast_p, per-turn improvement of a model",
        description=__doc__,
        epilog=CONFIG_EPILOG,
    )
    add_config_args(p, BenchConfig, example="samples=8")
    p.set_defaults(func=run, config_fn=config_from_args)


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    return load_from_args(args, BenchConfig)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def _correct(v: Verdict | None) -> bool:
    return v is not None and v.status is Status.CORRECT


def bench_metrics(
    problems: list[Problem],
    trajs: list[Trajectory],
    k: int,
    max_turns: int,
    reward: Callable[[Verdict], float] | None = None,
) -> dict[str, Any]:
    """`reward`: the task's (default: the conventional one of each verdict's preset)."""
    from tritonforge.evaluation.judge.summary import summarize
    from tritonforge.rollout.rewards import compute_reward

    reward = reward or functools.partial(compute_reward, name=None)

    by: dict[str, list[Trajectory]] = {p.id: [] for p in problems}
    for t in trajs:
        by.setdefault(t.problem_id, []).append(t)
    n_correct = {
        pid: sum(any(_correct(x.verdict) for x in ts.turns) for ts in lst)
        for pid, lst in by.items()
    }
    out: dict[str, Any] = {
        "problems": len(problems),
        "samples_per_problem": k,
        "pass@1": sum(pass_at_k(len(by[p.id]), n_correct[p.id], 1) for p in problems)
        / len(problems),
        f"pass@{k}": sum(pass_at_k(len(by[p.id]), n_correct[p.id], k) for p in problems)
        / len(problems),
        "pass_by_turn": [
            sum(any(_correct(x.verdict) for x in t.turns[: i + 1]) for t in trajs)
            / max(1, len(trajs))
            for i in range(max_turns)
        ],
        "final_status": dict(
            Counter(
                t.turns[-1].verdict.status.value if t.turns and t.turns[-1].verdict else t.status
                for t in trajs
            ).most_common()
        ),
    }
    levels: dict[str, Any] = {}
    for level in sorted({p.level for p in problems}):
        ids = [p.id for p in problems if p.level == level]
        verdicts = {
            pid: [x.verdict for t in by[pid] for x in t.turns if x.verdict is not None]
            for pid in ids
        }
        chosen = {pid: vs for pid, vs in verdicts.items() if vs}
        levels[f"level_{level}"] = summarize(chosen, ids, reward)
    out["levels"] = levels
    return out


async def _main(plan: BenchPlan) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from tritonforge.rollout.engines.base import build_engine
    from tritonforge.rollout.runner import build_agent, build_eval_backend
    from tritonforge.rollout.tiny_model import ensure_tiny_model

    cfg = plan.config
    if plan.episodes.engine_model.source == "tiny":
        ensure_tiny_model(plan.episodes.engine_model.path)
    tokenizer = AutoTokenizer.from_pretrained(plan.episodes.engine_model.path)
    engine = build_engine(cfg.engine)
    backend = build_eval_backend(cfg.eval)
    try:
        agent = build_agent(engine, tokenizer, cfg.task, cfg.agent, backend, cfg.eval)
        problems = plan.episodes.problems
        trajs = await agent.run(
            [(p, i, f"bench:{p.id}") for p in problems for i in range(cfg.samples)]
        )
        return bench_metrics(problems, trajs, cfg.samples, cfg.agent.max_turns, agent.task.reward)
    finally:
        await engine.aclose()
        await backend.aclose()


def _markdown(m: dict[str, Any]) -> str:
    k = m["samples_per_problem"]
    lines = [
        "| metric | value |",
        "|---|---|",
        f"| problems | {m['problems']} |",
        f"| pass@1 | {m['pass@1']:.3f} |",
        f"| pass@{k} | {m[f'pass@{k}']:.3f} |",
    ]
    lines += [f"| pass by turn {i + 1} | {x:.3f} |" for i, x in enumerate(m["pass_by_turn"])]
    for level, s in m["levels"].items():
        fast = (
            ", ".join(
                f"{key}={s[key]:.2f}" for key in s if key.startswith("fast_") and s[key] is not None
            )
            or "not timed"
        )
        lines.append(f"| {level} correct | {s['correctness_rate']:.3f} ({fast}) |")
    lines += ["", "| final status | count |", "|---|---|"] + [
        f"| {a} | {b} |" for a, b in m["final_status"].items()
    ]
    return "\n".join(lines) + "\n"


def _plot(m: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2))
    a.plot(range(1, len(m["pass_by_turn"]) + 1), m["pass_by_turn"], marker="o")
    a.set_xlabel("turn")
    a.set_title("pass rate reached by turn")
    a.set_ylim(0, 1)
    b.barh(list(m["final_status"]), list(m["final_status"].values()), color="#dd8452")
    b.set_title("final-turn verdicts")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    from tritonforge.plan.runs import resolve_bench

    plan = resolve_bench(config_from_args(args))
    out = plan.out
    out.mkdir(parents=True, exist_ok=True)
    save_config(plan.config, out / "config.json")
    metrics = asyncio.run(_main(plan))
    (out / "bench.json").write_text(json.dumps(metrics, indent=2) + "\n")
    (out / "bench.md").write_text(_markdown(metrics))
    _plot(metrics, out / "bench.png")
    print(json.dumps({k: v for k, v in metrics.items() if k != "levels"}))
    return 0
