"""Rollout throughput on CPU with the tiny model: trajectories/min, generated tokens/s, and the
agent's own overhead against raw engine calls.

The agent runs multi-turn episodes of built-in problems with the in-process HF engine and the
real sandboxed evaluator. Time inside `engine.generate` and inside `task.judge` is measured by
wrapping both; the agent's overhead is the rest (prompt rendering, extraction, feedback
rendering, token bookkeeping). A raw baseline calls `engine.generate` on the same first-turn
contexts directly. Prints one JSON document (and writes it to --out).

Usage: python benchmarks/rollout_throughput.py [--problems 4] [--samples 4] [--turns 2]
       [--max-new-tokens 128] [--model DIR] [--out results.json]
--model: an HF model dir; use the demo's SFT model (`runs/demo/sft/final`, after `tritonforge
demo`) so that responses contain code and the evaluator is exercised; a missing dir gets a fresh
random tiny model (whose answers hold no code, so judging costs nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from pathlib import Path


async def main(args: argparse.Namespace) -> dict:
    from transformers import AutoTokenizer

    from tritonforge.config.engine import HFEngineConfig
    from tritonforge.config.eval import EvalSettings
    from tritonforge.evaluation.judge.evaluator import Evaluator, LocalBackend
    from tritonforge.problems import load_suite
    from tritonforge.rollout.agent import Agent, AgentConfig
    from tritonforge.rollout.engines.base import SamplingParams, build_engine
    from tritonforge.rollout.prompts import PromptConfig, render
    from tritonforge.rollout.tasks import TaskConfig, build_task
    from tritonforge.rollout.tiny_model import ensure_tiny_model

    path = (
        args.model
        if Path(args.model, "config.json").exists()
        else str(ensure_tiny_model(args.model))
    )
    tok = AutoTokenizer.from_pretrained(path)
    engine = build_engine(HFEngineConfig(model_path=path, max_batch_size=64))
    settings = EvalSettings(device="cpu")
    backend = LocalBackend(Evaluator(settings), concurrency=2)
    task = build_task(TaskConfig(prompt=PromptConfig(include_example=False)), backend, settings)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0, seed=0)
    agent = Agent(
        engine, tok, task, AgentConfig(max_turns=args.turns, early_stop="never", sampling=params)
    )
    names = ["relu", "leaky_relu", "sigmoid", "silu", "tanh", "hardtanh"]
    problems = [p for p in load_suite("builtin", size="cpu") if p.name in names][: args.problems]
    jobs = [(p, i, p.id) for p in problems for i in range(args.samples)]

    spent = {"generate": 0.0, "judge": 0.0, "gen_tokens": 0}
    gen, judge = engine.generate, task.judge

    async def timed_generate(prompts, p):
        t0 = time.perf_counter()
        out = await gen(prompts, p)
        spent["generate"] += time.perf_counter() - t0
        spent["gen_tokens"] += sum(len(g.token_ids) for g in out)
        return out

    busy = {"n": 0, "since": 0.0}

    async def timed_judge(problem, extracted):
        # judges of one turn run concurrently: count the union of their intervals, not the sum
        if busy["n"] == 0:
            busy["since"] = time.perf_counter()
        busy["n"] += 1
        try:
            return await judge(problem, extracted)
        finally:
            busy["n"] -= 1
            if busy["n"] == 0:
                spent["judge"] += time.perf_counter() - busy["since"]

    engine.generate, task.judge = timed_generate, timed_judge
    await agent.run(
        jobs
    )  # warm-up with the same batch: fork server, references, CPU kernels per shape
    spent.update(generate=0.0, judge=0.0, gen_tokens=0)
    t0 = time.perf_counter()
    trajs = await agent.run(jobs)
    wall = time.perf_counter() - t0
    engine.generate = gen
    contexts = [render(tok, task.initial_messages(p)) for p, _, _ in jobs]
    t1 = time.perf_counter()
    raw = await engine.generate(contexts, params)
    raw_s = time.perf_counter() - t1
    await engine.aclose()
    await backend.aclose()
    # judging overlaps nothing in the lockstep agent, so overhead = wall - generate - judge
    overhead = wall - spent["generate"] - spent["judge"]
    turns = sum(len(t.turns) for t in trajs)
    return {
        "benchmark": "rollout_throughput",
        "host": platform.node(),
        "cpus": __import__("os").cpu_count(),
        "episodes": len(trajs),
        "turns": turns,
        "wall_s": round(wall, 2),
        "trajectories_per_min": round(len(trajs) / wall * 60, 2),
        "generated_tokens": spent["gen_tokens"],
        "generated_tokens_per_s": round(spent["gen_tokens"] / wall, 1),
        "engine_tokens_per_s": round(spent["gen_tokens"] / spent["generate"], 1),
        "share": {k: round(spent[k] / wall, 3) for k in ("generate", "judge")},
        "agent_overhead_s": round(overhead, 3),
        "agent_overhead_ms_per_turn": round(overhead / max(1, turns) * 1000, 2),
        "raw_first_turn": {
            "seconds": round(raw_s, 2),
            "tokens": sum(len(g.token_ids) for g in raw),
            "tokens_per_s": round(sum(len(g.token_ids) for g in raw) / raw_s, 1),
        },
        "settings": vars(args) | {"model": path},
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=4)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--model", default="runs/bench-tiny-model")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    result = asyncio.run(main(a))
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
