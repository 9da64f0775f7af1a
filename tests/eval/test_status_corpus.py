"""Every Status produced by a purpose-written candidate (tests/eval/status_corpus, manifest.toml).

Covers: each candidate judged against the corpus reference (ReLU on [64, 100] fp32) by one
module-scoped Evaluator on the CPU interpreter, asserting status, phase, rule and message
fragments; the numerical_mismatch details checked by hand (one element at flat index 123 =
[1, 23] off by 0.5); the same corpus on a CUDA device (`gpu` marker), where out_of_resources
and illegal_memory_access become real. Does not cover: reward-hack attacks (tests/eval/corpus).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.rollout.rewards import compute_reward
from tritonforge.types import Problem, Status, Verdict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CORPUS = Path(__file__).resolve().parent / "status_corpus"
MANIFEST = tomllib.loads((CORPUS / "manifest.toml").read_text())
CASES: list[dict[str, Any]] = MANIFEST["case"]
PROBLEM = Problem(
    id="status_corpus/relu",
    suite="status_corpus",
    name="relu",
    reference_src=(CORPUS / MANIFEST["reference"]).read_text(),
)


def settings_for(case: dict[str, Any], device: str) -> EvalSettings:
    """Fast settings (3 trials, fixed secret) plus the case's own dotted overrides."""
    s = EvalSettings(device=device, correctness_trials=3, secret_seed=1234, perf_trials=10)
    for key, value in (case.get("settings") or {}).items():
        *path, leaf = key.split(".")
        node: Any = s
        for part in path:
            node = getattr(node, part)
        setattr(node, leaf, value)
    return s


def check(case: dict[str, Any], v: Verdict, expected: str) -> None:
    detail = f"{case['file']}: {v.status.value} phase={v.phase} rule={v.rule}\n{v.message}"
    assert v.status is Status(expected), detail
    assert v.correct is (expected == "correct")
    assert v.problem_id == PROBLEM.id
    if "phase" in case and expected == case["status"]:
        assert v.phase == case["phase"], detail
    if "rule" in case:
        assert v.rule == case["rule"], detail
    if expected == case["status"]:
        for fragment in case.get("message", []):
            assert fragment in v.message, f"{fragment!r} not in message\n{detail}"
    if v.status.is_fault or v.status is Status.REWARD_HACK:
        assert compute_reward(v) == 0.0
    elif v.status.ran and not v.correct:
        assert compute_reward(v) == pytest.approx(0.1)  # tritonforge reward: ran but wrong


def check_numerical(v: Verdict) -> None:
    """numerical_mismatch.py adds 0.5 to flat element 123 (row 1, column 23) only."""
    mm = v.mismatch
    assert mm is not None
    assert mm.trial == 0 and mm.output_index == 0
    assert mm.distribution in ("native", "shifted", "scaled")
    assert mm.numel == 64 * 100 and mm.mismatched == 1
    assert mm.worst_index == [1, 23]
    assert mm.expected_shape == mm.got_shape == [64, 100]
    assert mm.expected_dtype == mm.got_dtype == "float32"
    assert mm.worst_expected is not None and mm.worst_got is not None
    assert mm.worst_expected >= 0.0  # a ReLU output
    assert mm.worst_got - mm.worst_expected == pytest.approx(0.5, abs=1e-5)
    assert mm.max_abs_diff == pytest.approx(0.5, abs=1e-5)
    # one bad element out of 6400, every other difference exactly 0
    assert mm.mean_abs_diff == pytest.approx(mm.max_abs_diff / 6400, rel=1e-5)
    assert v.trials_passed == 0 and v.trials_total == 3


@pytest.fixture(scope="module")
def cpu_evaluator() -> Iterator[Evaluator]:
    with Evaluator(EvalSettings(device="cpu", secret_seed=1234)) as ev:
        yield ev


@pytest.mark.parametrize("case", CASES, ids=[c["file"].removesuffix(".py") for c in CASES])
def test_status_cpu(cpu_evaluator: Evaluator, case: dict[str, Any]) -> None:
    expected = case.get("cpu_status", case["status"])
    if expected == "skip":
        pytest.skip("GPU-only status: the CPU interpreter has no shared memory limit")
    source = (CORPUS / case["file"]).read_text()
    v = cpu_evaluator.evaluate(PROBLEM, source, settings_for(case, "cpu"))
    check(case, v, expected)
    assert v.speedup is None and v.device == "cpu"
    if expected == "numerical_mismatch":
        check_numerical(v)
    if expected == "correct":
        assert v.compiled and v.trials_passed == 3
        assert v.audit is not None and v.audit.kernels == ["relu_kernel"]
        assert not v.audit.torch_ops
    if expected == "compile_error":
        assert not v.compiled
        assert "tl.dot(x, x)" in v.message  # the candidate's own line is shown
    if expected == "timeout":
        assert v.wall_seconds < 3.0 + 15.0


@pytest.mark.parametrize("name", ["no_code", "syntax_error", "missing_model_new", "reward_hack"])
def test_static_verdicts_name_the_requested_device(name: str) -> None:
    # Regression (H200, 2026-12-02): verdicts decided by the static checks said device "cpu" on
    # a CUDA evaluator. They run nothing, so no GPU is needed to check the label.
    source = (CORPUS / f"{name}.py").read_text()
    with Evaluator(EvalSettings(device="cuda", device_index=0, secret_seed=1)) as ev:
        v = ev.evaluate(PROBLEM, source, EvalSettings(device="cuda", device_index=0))
    assert v.phase == "static" and v.status.value == name
    assert v.device == "cuda:0"


def test_every_status_is_covered() -> None:
    """The corpus names every Status a candidate can cause (internal_error and judge_fault are
    the judge's own; judge_fault: tests/unit/test_budget.py and the device-memory tests)."""
    named = {c["status"] for c in CASES} | {c.get("cpu_status") for c in CASES}
    missing = {s.value for s in Status} - named - {"internal_error", "judge_fault"}
    assert not missing
    assert sorted(p.name for p in CORPUS.glob("*.py") if p.name != MANIFEST["reference"]) == sorted(
        c["file"] for c in CASES
    )


@pytest.fixture(scope="module")
def gpu_evaluator() -> Iterator[Evaluator]:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    with Evaluator(EvalSettings(device="cuda", secret_seed=1234)) as ev:
        yield ev


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[c["file"].removesuffix(".py") for c in CASES])
def test_status_gpu(gpu_evaluator: Evaluator, case: dict[str, Any]) -> None:
    source = (CORPUS / case["file"]).read_text()
    v = gpu_evaluator.evaluate(PROBLEM, source, settings_for(case, "cuda"))
    check(case, v, case["status"])
    assert v.device.startswith("cuda")
    if case["status"] == "numerical_mismatch":
        check_numerical(v)
    if case["status"] == "correct":
        assert v.compiled and v.speedup is not None and v.runtime is not None


def test_session_of_a_dead_worker_still_releases_everything(cpu_evaluator: Evaluator) -> None:
    # Regression: Session.close skipped its clean-up when the worker had already ended (a crash
    # sets the exit status first through wait_exit), so the shared device buffers of every
    # crashed candidate stayed allocated on a GPU (ExportedBuffer holds a raw fd and a mapping).
    from tritonforge.evaluation.judge.session import Session
    from tritonforge.evaluation.judge.workerenv import worker_spec

    class Recorder:  # stands in for the GPU-only transport; records the call
        closed = 0

        def close(self) -> None:
            self.closed += 1

    s = settings_for({}, "cpu")
    session = Session(cpu_evaluator.server("cpu"), worker_spec(s, "cpu", None), 1024)
    session.transport = Recorder()
    session.server.kill(session.pid)
    assert session.wait_exit(10.0) is not None  # the worker is gone, as after a crash
    session.close()
    session.close()
    assert session.transport.closed == 1
    assert session.sock.fileno() == -1
