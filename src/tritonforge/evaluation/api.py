"""The evaluation protocol shared by the in-process evaluator and the HTTP client.

Covers: `EvalBackend`, the one async method rollouts call. Does not cover: how a backend judges
(see judge.Evaluator) or transports (see client.EvalClient).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from tritonforge.config.eval import EvalSettings
from tritonforge.types import Problem, Verdict


@runtime_checkable
class EvalBackend(Protocol):
    async def evaluate(
        self, problem: Problem, source: str, settings: EvalSettings | None = None
    ) -> Verdict:
        """Judge `source` (a full candidate file defining ModelNew) against `problem`.

        Always returns a Verdict; never raises for a bad candidate.
        """
        ...

    async def aclose(self) -> None: ...
