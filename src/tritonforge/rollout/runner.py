"""Building the rollout pieces from config and collecting groups: shared by rollout and train.

Covers: `build_eval_backend`, `build_agent` and `collect` (n samples per problem
through the agent, into the buffer, with a progress bar and regeneration of dropped groups up to
the buffer's cap). Does not cover: the agent loop (agent.py), which problems (plan.problems) or
training.
"""

from __future__ import annotations

import os
import random
from typing import Any

from tqdm import tqdm

from tritonforge.config.rollout import EvalBackendConfig
from tritonforge.evaluation.api import EvalBackend
from tritonforge.logging_setup import get_logger
from tritonforge.rollout.agent import Agent, AgentConfig
from tritonforge.rollout.buffer import GroupOutcome, RolloutBuffer
from tritonforge.rollout.engines.base import Engine
from tritonforge.rollout.tasks import TaskConfig, build_task
from tritonforge.types import Problem

log = get_logger(__name__)


def build_eval_backend(cfg: EvalBackendConfig) -> EvalBackend:
    """The configured backend: concurrent evaluations of one problem judged as a group when
    `cfg.group_timing` (rollout/group_eval.py), behind a verdict memo when `cfg.cache`."""
    backend: EvalBackend
    if cfg.type == "http":
        from tritonforge.evaluation.service.client import EvalClient

        token = cfg.token or os.environ.get("TRITONFORGE_EVAL_TOKEN")
        backend = EvalClient(cfg.urls, token=token, timeout_s=cfg.timeout_s)
    else:
        from tritonforge.evaluation.judge.evaluator import Evaluator, LocalBackend

        backend = LocalBackend(Evaluator(cfg.settings), concurrency=cfg.concurrency)
    if cfg.group_timing:
        from tritonforge.rollout.group_eval import GroupedBackend

        backend = GroupedBackend(backend)
    if cfg.cache:
        from tritonforge.rollout.verdict_cache import CachedBackend

        return CachedBackend(backend)
    return backend


def build_agent(
    engine: Engine,
    tokenizer: Any,
    task_cfg: TaskConfig,
    agent_cfg: AgentConfig,
    backend: EvalBackend,
    eval_cfg: EvalBackendConfig,
) -> Agent:
    task = build_task(task_cfg, backend, eval_cfg.settings)
    return Agent(engine, tokenizer, task, agent_cfg)


async def collect(
    agent: Agent,
    problems: list[Problem],
    n: int,
    buffer: RolloutBuffer,
    desc: str = "rollout",
    rng: random.Random | None = None,
    show: bool = True,
) -> list[GroupOutcome]:
    """n samples of each problem as one lockstep batch; dropped groups are regenerated while the
    buffer allows. Returns the outcome of every group added."""
    pending = list(problems)
    outcomes: list[GroupOutcome] = []
    bar = tqdm(total=len(problems), desc=desc, unit="group", disable=not show, leave=False)
    rounds = 0
    while pending:
        rounds += 1
        tag = f"r{rounds}"
        jobs = [
            (p, i, f"{p.id}@v{agent.engine.policy_version}#{tag}")
            for p in pending
            for i in range(n)
        ]
        trajs = await agent.run(jobs)
        retry = []
        for k, p in enumerate(pending):
            group = trajs[k * n : (k + 1) * n]
            out = buffer.add(p.id, group, agent.engine.policy_version, group_id=group[0].group_id)
            outcomes.append(out)
            if out.accepted or not out.regenerate:
                bar.update(1)
            else:
                retry.append(p)
            bar.set_postfix_str(f"{p.name}: {'kept' if out.accepted else out.reason}")
        pending = retry
    bar.close()
    return outcomes
