"""Evaluations of one problem that arrive together are judged as one group.

Covers: `GroupedBackend`, an EvalBackend wrapper for rollouts: the samples of one GRPO group
ask for their verdicts at about the same time (the agent plays them side by side), so calls for
the same problem under the same settings that arrive within `window_s` of the first are sent as
one `evaluate_group` (the in-process Evaluator's, or a `/v1/eval/batch` of one problem on a
server), whose timings are one interleaved round-robin against one reference
(evaluation/judge/group_timing.py): the reference runs once per round for the whole group and
the speedups the advantage compares share the same device state. A backend without
`evaluate_group` gets the calls one by one. Every caller gets its own verdict.
Does not cover: judging (the backend), which samples form a GRPO group (the buffer).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from tritonforge.config.eval import EvalSettings
from tritonforge.types import Problem, Verdict


@dataclass
class _Batch:
    problem: Problem
    settings: EvalSettings | None
    items: list[tuple[str, asyncio.Future]] = field(default_factory=list)


class GroupedBackend:
    def __init__(self, inner: Any, window_s: float = 0.05, max_group: int = 64):
        self.inner, self.window_s, self.max_group = inner, window_s, max_group
        self._open: dict[str, _Batch] = {}
        self._tasks: set[asyncio.Task] = set()
        self.sent: list[int] = []  # sizes of the groups sent (diagnostics, tests)

    async def evaluate(
        self, problem: Problem, source: str, settings: EvalSettings | None = None
    ) -> Verdict:
        key = _key(problem, settings)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        batch = self._open.get(key)
        if batch is None:
            batch = self._open[key] = _Batch(problem, settings)
            asyncio.get_running_loop().call_later(self.window_s, self._flush, key, batch)
        batch.items.append((source, fut))
        if len(batch.items) >= self.max_group:
            self._flush(key, batch)
        return await fut

    def _flush(self, key: str, batch: _Batch) -> None:
        if self._open.get(key) is batch:
            del self._open[key]
            self.sent.append(len(batch.items))
            task = asyncio.ensure_future(self._judge(batch))
            self._tasks.add(task)  # (held until done: a task nobody refers to may be collected)
            task.add_done_callback(self._tasks.discard)

    async def _judge(self, batch: _Batch) -> None:
        sources = [s for s, _ in batch.items]
        group = getattr(self.inner, "evaluate_group", None)
        try:
            if group is not None and len(sources) > 1:
                verdicts = await group(batch.problem, sources, batch.settings)
            else:
                verdicts = await asyncio.gather(
                    *(self.inner.evaluate(batch.problem, s, batch.settings) for s in sources)
                )
        except Exception as exc:  # a backend promises verdicts; every caller hears of this
            for _, fut in batch.items:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for (_, fut), v in zip(batch.items, verdicts):
            if not fut.done():
                fut.set_result(v)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _key(problem: Problem, settings: EvalSettings | None) -> str:
    s = json.dumps(settings.model_dump(mode="json"), sort_keys=True) if settings else ""
    payload = f"{problem.id}\0{problem.reference_src}\0{s}"
    return hashlib.sha256(payload.encode()).hexdigest()
