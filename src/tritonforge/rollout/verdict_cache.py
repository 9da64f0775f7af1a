"""A memo of verdicts in front of an evaluation backend: the same program is judged once per run.

Covers: `CachedBackend`, an `EvalBackend` that keys each request by problem (id and reference
source), the candidate's exact source and the settings that change a verdict, answers repeats
from memory, and counts hits and misses. Verdicts a repeat could change are not kept: timeouts,
internal errors and anything timed (a speedup is a measurement, not a property of the code).
Does not cover: judging (the wrapped backend) or sharing a memo between processes.

Why it is sound on the CPU interpreter: an Evaluator draws its hidden input seeds once (or from
`secret_seed`), so the same source on the same problem gets the same inputs and the same verdict;
a near-converged policy writes the same program many times, and judging it again only costs time.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.api import EvalBackend
from tritonforge.types import Problem, Status, Verdict

__all__ = ["CachedBackend"]

_NOT_KEPT = {Status.TIMEOUT, Status.INTERNAL_ERROR}


class CachedBackend:
    """EvalBackend wrapper that memoises deterministic verdicts (see the module docstring)."""

    def __init__(self, inner: EvalBackend) -> None:
        self.inner = inner
        self._memo: dict[str, Verdict] = {}
        self.counts: Counter[str] = Counter()

    @staticmethod
    def key(problem: Problem, source: str, settings: EvalSettings | None) -> str:
        s = settings.cache_key() if settings is not None else None
        blob = json.dumps([problem.id, problem.reference_src, source, s], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    async def evaluate(
        self, problem: Problem, source: str, settings: EvalSettings | None = None
    ) -> Verdict:
        k = self.key(problem, source, settings)
        hit = self._memo.get(k)
        if hit is not None:
            self.counts["hits"] += 1
            return hit.model_copy(deep=True)
        self.counts["misses"] += 1
        verdict = await self.inner.evaluate(problem, source, settings)
        if verdict.status not in _NOT_KEPT and verdict.runtime is None:
            self._memo[k] = verdict.model_copy(deep=True)
        return verdict

    async def aclose(self) -> None:
        await self.inner.aclose()
