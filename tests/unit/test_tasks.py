"""Task registry: the kernel task against a fake EvalBackend, and the arith sanity task."""

from __future__ import annotations

import asyncio

import pytest

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.api import EvalBackend
from tritonforge.rollout.extract import Found
from tritonforge.rollout.tasks import (
    TASKS,
    ArithTask,
    KernelTask,
    Task,
    TaskConfig,
    build_task,
    make_arith_problems,
)
from tritonforge.types import Problem, Status, Verdict

REF = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
CODE = "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"
PROBLEM = Problem(id="builtin/relu", suite="builtin", name="relu", reference_src=REF)


class FakeBackend:
    """Returns prepared verdicts in order and records what it was asked."""

    def __init__(self, verdicts: list[Verdict], fail: bool = False) -> None:
        self.verdicts = list(verdicts)
        self.calls: list[tuple[str, str, EvalSettings | None]] = []
        self.fail = fail

    async def evaluate(
        self, problem: Problem, source: str, settings: EvalSettings | None = None
    ) -> Verdict:
        self.calls.append((problem.id, source, settings))
        if self.fail:
            raise ConnectionError("eval server unreachable")
        return self.verdicts.pop(0)

    async def aclose(self) -> None:
        return None


def test_registry_and_protocol() -> None:
    assert set(TASKS) >= {"kernel", "arith"}
    assert isinstance(build_task(), KernelTask)
    assert isinstance(build_task(TaskConfig(type="arith")), ArithTask)
    assert isinstance(build_task(), Task) and isinstance(ArithTask(), Task)
    assert isinstance(FakeBackend([]), EvalBackend)
    with pytest.raises(KeyError, match="known"):
        build_task(TaskConfig(type="chess"))


def test_kernel_task_round_trip_with_fake_backend() -> None:
    prepared = Verdict(
        status=Status.COMPILE_ERROR,
        message="CompilationError: at 3:4: bad",
        device="cuda",
    )
    backend = FakeBackend([prepared])
    settings = EvalSettings(device="cpu")
    task = build_task(TaskConfig(), backend=backend, settings=settings)
    msgs = task.initial_messages(PROBLEM)
    assert [m["role"] for m in msgs] == ["system", "user"] and REF.strip() in msgs[1]["content"]
    ex = task.extract(f"<think>plan</think>\n```python\n{CODE}```")
    assert (ex.code, ex.found) == (CODE, Found.FENCED_MODEL_NEW)
    v = asyncio.run(task.judge(PROBLEM, ex))
    assert v is prepared
    assert backend.calls == [("builtin/relu", CODE, settings)]
    fb = task.feedback(v)
    assert "compile_error" in fb and "CompilationError: at 3:4: bad" in fb


def test_kernel_task_no_code_skips_backend() -> None:
    backend = FakeBackend([])
    task = KernelTask(backend=backend)
    v = asyncio.run(
        task.judge(
            PROBLEM, task.extract("<think>still thinking ```python\nclass ModelNew: pass\n```")
        )
    )
    assert v.status is Status.NO_CODE and task.reward(v) == 0.0 and v.problem_id == "builtin/relu"
    assert "without a closing </think>" in v.message
    assert backend.calls == []
    v2 = asyncio.run(task.judge(PROBLEM, task.extract("I cannot do this.")))
    assert "No ```python block" in v2.message


def test_kernel_task_backend_failure_is_a_status() -> None:
    task = KernelTask(backend=FakeBackend([], fail=True))
    v = asyncio.run(task.judge(PROBLEM, task.extract(f"```python\n{CODE}```")))
    assert v.status is Status.INTERNAL_ERROR and "ConnectionError" in v.message
    no_backend = asyncio.run(KernelTask().judge(PROBLEM, task.extract(f"```python\n{CODE}```")))
    assert no_backend.status is Status.INTERNAL_ERROR


def test_arith_problems_are_seeded() -> None:
    a = make_arith_problems(5, seed=1)
    assert [p.id for p in a] == [p.id for p in make_arith_problems(5, seed=1)]
    p = a[0]
    assert p.suite == "arith" and p.name == f"{p.meta['a']}+{p.meta['b']}"


def test_arith_task() -> None:
    task = build_task(TaskConfig(type="arith"))
    p = Problem(
        id="arith/0_3+4", suite="arith", name="3+4", reference_src="", meta={"a": 3, "b": 4}
    )
    assert task.initial_messages(p) == [
        {"role": "user", "content": "What is 3+4? End your answer with the number."}
    ]
    right = task.extract("<think>maybe 8? no: 3+4</think>3 + 4 = 7")
    assert (right.code, right.found) == ("7", Found.ANSWER)  # last integer outside thinking
    v = asyncio.run(task.judge(p, right))
    assert (v.status, v.correct, task.reward(v)) == (Status.CORRECT, True, 1.0)
    assert task.feedback(v) == "Correct."
    wrong = asyncio.run(task.judge(p, task.extract("The answer is 8.")))
    assert (wrong.status, task.reward(wrong)) == (Status.NUMERICAL_MISMATCH, 0.0)
    assert (
        task.feedback(wrong)
        == "8 is not the right answer. Try again and end your answer with the number."
    )
    none = asyncio.run(task.judge(p, task.extract("<think>7</think>I do not know")))
    assert none.status is Status.NO_CODE and task.reward(none) == 0.0
    neg = Problem(
        id="arith/1", suite="arith", name="-5+2", reference_src="", meta={"a": -5, "b": 2}
    )
    assert task.reward(asyncio.run(task.judge(neg, task.extract("It is -3")))) == 1.0


def test_kernel_task_computes_its_own_reward_from_the_facts() -> None:
    """The judge states facts; the task's reward name and hack penalty turn them into rewards,
    and a changed reward needs no new verdict."""
    fast = Verdict(status=Status.CORRECT, speedup=2.0, speedup_vs_compile=1.5, preset="strict")
    hack = Verdict(status=Status.REWARD_HACK, rule="timing_tamper", compiled=True)
    conventional = build_task(TaskConfig())
    assert conventional.reward(fast) == pytest.approx(1.3)  # strict: tritonforge, vs eager
    assert conventional.reward(fast.model_copy(update={"preset": "tritonforge"})) == (
        pytest.approx(0.8)  # the original release's: vs torch.compile
    )
    kevin = build_task(TaskConfig(reward="kevin", hack_penalty=-1.0))
    assert kevin.reward(fast) == pytest.approx(2.3) and kevin.reward(hack) == -1.0
    assert conventional.reward(hack) == 0.0
