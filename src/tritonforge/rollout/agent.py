"""The multi-turn agent: generate, extract, judge, feed back, repeat; token in, token out.

Covers: `AgentConfig` (from config.agent), `ChatFrame` (the exact feedback tokens appended between turns, derived
from the tokenizer's chat template), and `Agent.run` which plays a batch of episodes in
lockstep (one engine call per turn for all live episodes, judging concurrently). A trajectory's
token stream is exactly what the engine produced plus template/feedback tokens: nothing is ever
re-tokenized, so turn t+1's context starts with the exact ids of turn t. Loss mask is 1 on
model tokens only. A failed engine call ends the episode without a fake assistant turn.
Does not cover: grouping, normalisation (buffer.py), returns (returns.py), training.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from tritonforge.config.agent import AgentConfig
from tritonforge.logging_setup import get_logger
from tritonforge.rollout.engines.base import Engine
from tritonforge.rollout.prompts import continuation_ids, end_of_turn_id, render
from tritonforge.rollout.returns import apply_returns
from tritonforge.rollout.tasks import Task
from tritonforge.types import GenStatus, Problem, Status, Trajectory, Turn

log = get_logger(__name__)


class ChatFrame:
    """Token-exact turn boundaries from the tokenizer's chat template.

    After an assistant response the next context is: the end-of-turn token (unless the response
    already ended with it) + the template's continuation through the next generation prompt,
    found by counting end-of-turn tokens (robust to templates that re-render earlier turns,
    such as Qwen3's dropping old reasoning).
    """

    _HISTORY = ({"role": "user", "content": "."}, {"role": "assistant", "content": "."})

    def __init__(self, tokenizer: Any, end_of_turn: str | None = None):
        self.tok = tokenizer
        self.eot = end_of_turn_id(tokenizer, end_of_turn)
        eos = getattr(tokenizer, "eos_token_id", None)
        self.stop_ids = sorted({self.eot} | ({eos} if isinstance(eos, int) else set()))
        self.feedback_ids([self.eot], "probe")  # fail early if the template cannot be extended

    def feedback_ids(self, response_ids: list[int], feedback: str) -> list[int]:
        """Tokens to append after `response_ids` for a user turn carrying `feedback`."""
        delta = continuation_ids(
            self.tok, list(self._HISTORY), [{"role": "user", "content": feedback}], self.eot
        )
        close = [] if response_ids and response_ids[-1] == self.eot else [self.eot]
        return close + delta


@dataclass
class _Episode:
    problem: Problem
    sample_index: int
    group_id: str
    prompt_ids: list[int]
    context: list[int]
    mask: list[int]
    logps: list[float]
    turns: list[Turn] = field(default_factory=list)
    done: bool = False
    status: str = "ok"
    meta: dict[str, Any] = field(default_factory=dict)


class Agent:
    """Plays episodes of a task against an engine. Stateless between calls."""

    def __init__(self, engine: Engine, tokenizer: Any, task: Task, cfg: AgentConfig | None = None):
        self.engine, self.tok, self.task = engine, tokenizer, task
        self.cfg = cfg or AgentConfig()
        self.frame = ChatFrame(tokenizer)
        params = self.cfg.sampling
        if not params.stop_token_ids:
            params = params.model_copy(update={"stop_token_ids": self.frame.stop_ids})
        self.params = params

    def _start(self, problem: Problem, sample_index: int, group_id: str) -> _Episode:
        prompt = render(self.tok, self.task.initial_messages(problem), add_generation_prompt=True)
        return _Episode(
            problem,
            sample_index,
            group_id,
            list(prompt),
            list(prompt),
            [0] * len(prompt),
            [0.0] * len(prompt),
        )

    def _stop(self, v) -> bool:
        if self.cfg.early_stop == "never" or v is None or v.status is not Status.CORRECT:
            return False
        return self.cfg.early_stop == "correct" or (v.speedup or 0.0) >= self.cfg.stop_speedup

    async def run(self, jobs: list[tuple[Problem, int, str]]) -> list[Trajectory]:
        """Play one episode per (problem, sample_index, group_id); returns trajectories in order."""
        eps = [self._start(p, i, g) for p, i, g in jobs]
        version = self.engine.policy_version
        for t in range(self.cfg.max_turns):
            live = [e for e in eps if not e.done]
            if not live:
                break
            budget = self.cfg.max_context_tokens - self.params.max_new_tokens
            for e in live:
                if len(e.context) > budget:
                    e.done = True
                    e.meta["stopped"] = "context_limit"
            live = [e for e in live if not e.done]
            if not live:
                break
            t0 = time.monotonic()
            gens = await self.engine.generate([e.context for e in live], self.params)
            gen_s = time.monotonic() - t0
            texts = [self.tok.decode(g.token_ids, skip_special_tokens=True) for g in gens]
            extracted = [self.task.extract(x) for x in texts]
            ok = [g.status in (GenStatus.OK, GenStatus.LENGTH) and g.token_ids for g in gens]
            verdicts = await asyncio.gather(
                *[
                    self.task.judge(e.problem, x) if good else _none()
                    for e, x, good in zip(live, extracted, ok)
                ]
            )
            for e, g, text, x, v, good in zip(live, gens, texts, extracted, verdicts, ok):
                if not good:  # failure is data: no fake assistant turn, the episode ends here
                    e.done = True
                    e.meta["generation_error"] = g.error or g.status.value
                    if not e.turns:
                        e.status = "generation_failed"
                    continue
                turn = Turn(
                    index=t,
                    prompt_len=len(e.context),
                    response_ids=list(g.token_ids),
                    response_logprobs=list(g.logprobs),
                    response_text=text,
                    code=x.code,
                    finish_reason=g.finish_reason,
                    verdict=v,
                    reward=self.task.reward(v) if v is not None else 0.0,
                )
                e.context += turn.response_ids
                e.mask += [1] * len(turn.response_ids)
                e.logps += turn.response_logprobs
                e.turns.append(turn)
                e.meta.setdefault("gen_seconds", 0.0)
                e.meta["gen_seconds"] += gen_s
                if self._stop(v) or t == self.cfg.max_turns - 1:
                    e.done = True
                    continue
                fb = self.task.feedback(v, response_truncated=g.status is GenStatus.LENGTH)
                ids = self.frame.feedback_ids(turn.response_ids, fb)
                turn.feedback_text, turn.feedback_ids = fb, ids
                e.context += ids
                e.mask += [0] * len(ids)
                e.logps += [0.0] * len(ids)
        return [self._finish(e, version) for e in eps]

    def _finish(self, e: _Episode, version: int) -> Trajectory:
        traj = Trajectory(
            problem_id=e.problem.id,
            sample_index=e.sample_index,
            group_id=e.group_id,
            policy_version=version,
            prompt_ids=e.prompt_ids,
            token_ids=e.context,
            loss_mask=e.mask,
            rollout_logprobs=e.logps,
            turns=e.turns,
            status=e.status,
            meta=e.meta,
        )
        # a trailing feedback turn is never generated from: drop it so the stream ends on model tokens
        if traj.turns and traj.turns[-1].feedback_ids:
            n = len(traj.turns[-1].feedback_ids)
            traj.token_ids, traj.loss_mask, traj.rollout_logprobs = (
                traj.token_ids[:-n],
                traj.loss_mask[:-n],
                traj.rollout_logprobs[:-n],
            )
            traj.turns[-1].feedback_ids, traj.turns[-1].feedback_text = [], ""
        if traj.turns:
            apply_returns(traj, self.cfg.returns)
            traj.raw_reward = traj.turns[0].ret
        return traj


async def _none() -> None:
    return None
