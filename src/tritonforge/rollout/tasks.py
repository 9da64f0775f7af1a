"""Task types the agent loop can run, in a registry keyed by name: `kernel` and `arith`.

Covers: the `Task` interface the multi-turn loop calls (`initial_messages`, `extract`, async
`judge` -> Verdict, `feedback`), `TaskConfig` (from config.task), `build_task`, the `kernel` task (prompts,
extraction and feedback of this package, verdicts from an `EvalBackend`) and the `arith` sanity
task ("What is a+b?", reward 1 when the answer's last integer is right). Does not cover: the
loop itself, tokens or engines, or how a backend judges (see evaluation).

Every task answers with a `Verdict` (arith fills status CORRECT / NUMERICAL_MISMATCH / NO_CODE)
and turns it into the answer's reward itself (`Task.reward`: the judge states facts, the task
rewards them), so turns, returns, the buffer and its statistics work unchanged for any task.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from tritonforge.config.eval import EvalSettings
from tritonforge.config.registry import Registry
from tritonforge.config.task import FeedbackConfig, PromptConfig, TaskConfig
from tritonforge.evaluation.api import EvalBackend
from tritonforge.logging_setup import get_logger
from tritonforge.rollout.extract import Extraction, Found, ThinkState, extract_code, split_thinking
from tritonforge.rollout.feedback import build_feedback
from tritonforge.rollout.prompts import build_messages
from tritonforge.rollout.rewards import compute_reward
from tritonforge.types import Problem, Status, Verdict

__all__ = [
    "TASKS",
    "ArithTask",
    "KernelTask",
    "Task",
    "TaskConfig",
    "build_task",
    "make_arith_problems",
]

log = get_logger(__name__)


@runtime_checkable
class Task(Protocol):
    """What the multi-turn loop needs from a task type."""

    name: str

    def initial_messages(self, problem: Problem) -> list[dict[str, str]]: ...

    def extract(self, text: str) -> Extraction: ...

    async def judge(self, problem: Problem, extracted: Extraction) -> Verdict: ...

    def reward(self, verdict: Verdict) -> float: ...

    def feedback(self, verdict: Verdict, response_truncated: bool = False) -> str: ...


def _no_code_message(extracted: Extraction) -> str:
    if extracted.think_state is ThinkState.UNTERMINATED:
        return "Your answer ended inside <think> without a closing </think>, so no code was read."
    return "No ```python block defining class ModelNew was found in your answer."


@dataclass
class KernelTask:
    """Write a Triton `ModelNew` for a KernelBench-format problem; judged by an EvalBackend."""

    backend: EvalBackend | None = None
    prompt: PromptConfig = field(default_factory=PromptConfig)
    feedback_cfg: FeedbackConfig = field(default_factory=FeedbackConfig)
    settings: EvalSettings | None = None
    allow_code_in_think: bool = False
    reward_name: str | None = None  # None: the conventional one of the verdict's preset
    hack_penalty: float = 0.0
    name: str = "kernel"

    def initial_messages(self, problem: Problem) -> list[dict[str, str]]:
        return build_messages(problem, self.prompt)

    def extract(self, text: str) -> Extraction:
        return extract_code(text, allow_code_in_think=self.allow_code_in_think)

    async def judge(self, problem: Problem, extracted: Extraction) -> Verdict:
        """The backend's verdict; NO_CODE without a call; INTERNAL_ERROR if the call failed."""
        if extracted.code is None:
            return Verdict(
                status=Status.NO_CODE, problem_id=problem.id, message=_no_code_message(extracted)
            )
        if self.backend is None:
            return Verdict(
                status=Status.INTERNAL_ERROR,
                problem_id=problem.id,
                message="no evaluation backend configured",
            )
        try:
            return await self.backend.evaluate(problem, extracted.code, self.settings)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a transport failure is a status, never a crash of the loop
            log.warning("evaluation of %s failed: %s: %s", problem.id, type(exc).__name__, exc)
            return Verdict(
                status=Status.INTERNAL_ERROR,
                problem_id=problem.id,
                message=f"evaluation backend failed: {type(exc).__name__}: {exc}",
            )

    def reward(self, verdict: Verdict) -> float:
        """The answer's reward: computed here, once, from the judge's facts."""
        return compute_reward(verdict, self.reward_name, self.hack_penalty)

    def feedback(self, verdict: Verdict, response_truncated: bool = False) -> str:
        return build_feedback(verdict, self.feedback_cfg, response_truncated=response_truncated)


_INT = re.compile(r"-?\d+")


def make_arith_problems(n: int, seed: int = 0, low: int = 0, high: int = 99) -> list[Problem]:
    """n problems 'a+b' with a, b uniform in [low, high] (seeded, so reproducible)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(low, high), rng.randint(low, high)
        out.append(
            Problem(
                id=f"arith/{i}_{a}+{b}",
                suite="arith",
                name=f"{a}+{b}",
                category="arith",
                reference_src="",
                problem_id=i,
                meta={"a": a, "b": b},
            )
        )
    return out


@dataclass
class ArithTask:
    """Sanity-check task: 'What is a+b?'; reward 1 if the last integer of the answer is a+b."""

    name: str = "arith"

    def initial_messages(self, problem: Problem) -> list[dict[str, str]]:
        a, b = problem.meta["a"], problem.meta["b"]
        return [{"role": "user", "content": f"What is {a}+{b}? End your answer with the number."}]

    def extract(self, text: str) -> Extraction:
        visible, thinking, state = split_thinking(text or "")
        found = _INT.findall(visible)
        if not found:
            return Extraction(None, Found.NONE, thinking, state, visible)
        return Extraction(str(int(found[-1])), Found.ANSWER, thinking, state, visible)

    async def judge(self, problem: Problem, extracted: Extraction) -> Verdict:
        expected = int(problem.meta["a"]) + int(problem.meta["b"])
        base = {"problem_id": problem.id, "trials_total": 1}
        if extracted.code is None:
            return Verdict(
                status=Status.NO_CODE, message="No integer was found in your answer.", **base
            )
        if int(extracted.code) == expected:
            return Verdict(
                status=Status.CORRECT,
                correct=True,
                trials_passed=1,
                message=f"{expected} is right.",
                **base,
            )
        return Verdict(
            status=Status.NUMERICAL_MISMATCH,
            message=f"{extracted.code} is not the right answer.",
            **base,
        )

    def reward(self, verdict: Verdict) -> float:
        return 1.0 if verdict.status is Status.CORRECT else 0.0

    def feedback(self, verdict: Verdict, response_truncated: bool = False) -> str:
        if verdict.status is Status.CORRECT:
            return "Correct."
        cut = " Your answer was cut off; answer more briefly." if response_truncated else ""
        return f"{verdict.message}{cut} Try again and end your answer with the number."


TaskFactory = Callable[[TaskConfig, "EvalBackend | None", "EvalSettings | None"], Task]
TASKS: Registry[TaskFactory] = Registry(
    "task",
    {
        "kernel": lambda cfg, backend, settings: KernelTask(
            backend,
            cfg.prompt,
            cfg.feedback,
            settings,
            cfg.allow_code_in_think,
            cfg.reward,
            cfg.hack_penalty,
        ),
        "arith": lambda cfg, backend, settings: ArithTask(),
    },
)


def build_task(
    cfg: TaskConfig | None = None,
    backend: EvalBackend | None = None,
    settings: EvalSettings | None = None,
) -> Task:
    """The task named by `cfg.type` (an UnknownName, a KeyError, lists the known ones)."""
    cfg = cfg or TaskConfig()
    return TASKS.lookup(cfg.type)(cfg, backend, settings)
