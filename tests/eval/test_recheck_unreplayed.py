"""The re-check after timing of a candidate that is not replayed, on the CPU.

Only the CUDA C++ backend is timed in its own process and re-checked there (recheck.py's worker
branch: `trials.judge_trial` with no launch history, then the timing rules, wrong outputs now
`changed_after_timing`); the Evaluator refuses that backend on the CPU. Here the admitted phases
are called directly (`phases.judge_admitted`, below that refusal) with `backend = "cuda"` settings
and Triton candidates (helpers/timed_kernels.py), so the branch runs with real workers and the
real timing process (the timing path on the CPU: its numbers mean nothing). Call counts follow `hc.cpu_timing_settings`:
calls 1-3 correctness, 4-13 the two timing rounds, 14 the re-check.
Does not cover: the CUDA backend itself (tests/gpu/test_cuda_backend_gpu.py), the replayed
re-check (test_timed_audit.py, test_replay.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import pytest

import helpers.hack_corpus as hc
from helpers import timed_kernels
from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.evaluation.judge.phases import Job, judge_admitted
from tritonforge.evaluation.judge.trials import NOT_REPLAYED
from tritonforge.evaluation.judge.verdicts import CPU_TIMED
from tritonforge.problems import load_suite
from tritonforge.types import Problem, Status, Verdict

pytestmark = pytest.mark.slow

# the counter in device memory: the re-check's call (the 14th) computes zeros, with the same
# launches as every other call
COUNTED = timed_kernels.counted(13)


def _settings(mode: str = "strict") -> EvalSettings:
    return hc.cpu_timing_settings(backend="cuda", mode=mode, bootstrap_samples=100)


@pytest.fixture(scope="module")
def relu() -> Problem:
    return next(p for p in load_suite("builtin", size="cpu") if p.name == "relu")


@pytest.fixture(scope="module")
def ev() -> Iterator[Evaluator]:
    with Evaluator(_settings()) as e:
        yield e


def _judge(ev: Evaluator, problem: Problem, source: str, s: EvalSettings) -> Verdict:
    ref = ev.refs.reference(problem, "cpu")
    plan = ev._plan(problem, source, s)
    job = Job(problem, source, s, "cpu", ref, plan, defaultdict(float))
    return judge_admitted(ev.tools, job).verdict


def test_an_honest_candidate_is_timed_in_its_own_process_and_accepted(ev, relu) -> None:
    v = _judge(ev, relu, timed_kernels.relu(), _settings())
    assert v.status is Status.CORRECT, v.message
    assert NOT_REPLAYED in v.notes and v.notes[-1] == CPU_TIMED
    assert v.runtime is not None and v.speedup is not None
    assert "recheck" in v.phase_seconds and "replay" not in v.phase_seconds


def test_wrong_outputs_after_the_timing_are_changed_after_timing(ev, relu) -> None:
    v = _judge(ev, relu, COUNTED, _settings())
    assert v.status is Status.REWARD_HACK and v.rule == "changed_after_timing", v.message
    assert v.phase is None and v.mismatch is not None and v.runtime is not None
    assert v.trials_passed == v.trials_total == 2
    assert "wrong on fresh inputs right after the timing loop" in v.message


def test_timed_calls_that_launch_differently_are_launch_mismatch(ev, relu) -> None:
    v = _judge(ev, relu, timed_kernels.relu("4 <= self.calls <= 13", block=256), _settings())
    assert v.status is Status.REWARD_HACK and v.rule == "launch_mismatch", v.message
    # the 8 timed calls (the warmups are not compared) launched with 256, the re-check's with 1024
    assert v.message.startswith("8 of 9 timed calls launched different kernels"), v.message


def test_the_audit_rules_apply_to_the_recheck_call(ev, relu) -> None:
    """Only the re-check's call computes in PyTorch: strict's audit rule, from judge_trial."""
    source = timed_kernels.relu("self.calls >= 14", result="torch.relu(x)")
    v = _judge(ev, relu, source, _settings())
    assert v.status is Status.REWARD_HACK and v.rule == "torch_compute", v.message
    assert v.runtime is not None  # timed before the re-check rejected it
