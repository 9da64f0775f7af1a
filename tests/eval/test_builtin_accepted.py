"""Every built-in reference solution is accepted in strict mode at the cpu preset.

Covers: all problems of `load_suite("builtin", size="cpu")` judged on the CPU interpreter by one
Evaluator with two candidates in flight (as `eval-dir --workers 2` does), each verdict correct,
compiled, with no PyTorch compute op in its audit; plus the same at the gpu preset on a CUDA
device (`gpu` marker), with speedups recorded. Does not cover: the solutions' speed on CPU
(the interpreter is not timed).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.problems import load_suite
from tritonforge.rollout.rewards import compute_reward
from tritonforge.types import Problem, Status, Verdict

CPU_PROBLEMS = load_suite("builtin", size="cpu")
IDS = [p.name for p in CPU_PROBLEMS]


def judge_all(problems: list[Problem], settings: EvalSettings) -> dict[str, Verdict]:
    with Evaluator(settings) as ev, ThreadPoolExecutor(2) as pool:
        futures = {p.id: pool.submit(ev.evaluate, p, p.solution_src) for p in problems}
        return {pid: f.result() for pid, f in futures.items()}


def check_accepted(p: Problem, v: Verdict) -> None:
    why = f"{p.id}: {v.status.value} rule={v.rule} phase={v.phase}\n{v.message[:2000]}"
    assert v.status is Status.CORRECT, why
    assert v.correct and v.compiled, why
    assert v.mode == "strict"
    assert v.trials_passed == v.trials_total == 5
    assert v.audit is not None and v.audit.kernel_launches >= 1 and v.audit.kernels
    assert v.audit.torch_ops == {}, why + f"\ntorch ops: {v.audit.torch_ops}"
    assert not v.audit.violations


def test_suite_has_solutions() -> None:
    assert len(CPU_PROBLEMS) >= 30
    assert all(p.solution_src for p in CPU_PROBLEMS)


@pytest.fixture(scope="module")
def cpu_verdicts() -> dict[str, Verdict]:
    return judge_all(CPU_PROBLEMS, EvalSettings(device="cpu", mode="strict"))


@pytest.mark.slow
@pytest.mark.parametrize("problem", CPU_PROBLEMS, ids=IDS)
def test_builtin_solution_accepted_cpu(cpu_verdicts: dict[str, Verdict], problem: Problem) -> None:
    v = cpu_verdicts[problem.id]
    check_accepted(problem, v)
    assert v.speedup is None and v.device == "cpu"
    assert compute_reward(v) == pytest.approx(0.3)  # correct, not timed


@pytest.fixture(scope="module")
def gpu_verdicts() -> Iterator[dict[str, Verdict]]:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    problems = load_suite("builtin", size="gpu")
    yield judge_all(problems, EvalSettings(device="cuda", mode="strict"))


@pytest.mark.gpu
@pytest.mark.parametrize("problem", CPU_PROBLEMS, ids=IDS)
def test_builtin_solution_accepted_gpu(gpu_verdicts: dict[str, Verdict], problem: Problem) -> None:
    v = gpu_verdicts[problem.id]
    check_accepted(problem, v)
    assert v.speedup is not None and v.speedup > 0
    assert v.runtime is not None and v.ref_runtime is not None
