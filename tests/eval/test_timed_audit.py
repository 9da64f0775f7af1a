"""What is timed is the trusted replay of the candidate's kernels, never its own process (CPU,
`time_on_cpu`).

Covers, through `Evaluator.evaluate` with real workers, the real replayer and the real timing
process (the timing path runs on the CPU; its numbers mean nothing here): an honest kernel is
replayed, timed on both sides and accepted; a candidate whose forward launches differently, or
returns a tensor subclass, only in the calls its own process would have timed gains nothing and
is judged by its kernels' replay (the recipe comes from a profiled correctness call); a kernel
that keeps a call counter in a buffer of the model sees the buffer restored before every
replayed call, so its timed calls do the work of its checked calls. The call counts follow
`hc.cpu_timing_settings` (2 correctness trials, the last one calling forward twice). Does not
cover: the GPU (tests/gpu/test_attacks_gpu.py), the replay's own rules (test_replay.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import helpers.hack_corpus as hc
from helpers import timed_kernels
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.problems import load_suite
from tritonforge.types import Problem, Status

pytestmark = pytest.mark.slow

# calls 1-3: correctness (trial 1; trial 2's caching-check call and its audited call);
# 4-13: the two timing rounds (warmup + 4 timed calls each); 14: the re-check after timing
TIMED = "4 <= self.calls <= 13"


def _source(block_when_timed: int, subclass_when_timed: bool) -> str:
    return timed_kernels.relu(
        TIMED, block_when_timed, "out.as_subclass(Sub)" if subclass_when_timed else "out"
    )


@pytest.fixture(scope="module")
def relu() -> Problem:
    return next(p for p in load_suite("builtin", size="cpu") if p.name == "relu")


@pytest.fixture(scope="module")
def ev() -> Iterator[Evaluator]:
    with Evaluator(hc.cpu_timing_settings(bootstrap_samples=100)) as e:
        yield e


def test_honest_kernel_is_timed_and_accepted(ev: Evaluator, relu: Problem) -> None:
    v = ev.evaluate(relu, _source(1024, False))
    assert v.status is Status.CORRECT, v.message
    assert v.runtime is not None and v.ref_runtime is not None and v.speedup is not None


def test_calls_the_candidate_would_have_timed_change_nothing(ev: Evaluator, relu: Problem) -> None:
    """Calls 4-13 were the candidate's timed calls before the replay was timed: they launch with
    another block size now, and nothing of the verdict depends on them."""
    v = ev.evaluate(relu, _source(256, False))
    assert v.status is Status.CORRECT, v.message
    assert v.phase_seconds.get("replay", 0) > 0 and v.phase_seconds.get("timed_rounds", 0) > 0
    assert v.runtime is not None and v.speedup is not None


def test_a_subclass_in_unobserved_calls_changes_nothing(ev: Evaluator, relu: Problem) -> None:
    v = ev.evaluate(relu, _source(1024, True))
    assert v.status is Status.CORRECT, v.message
    assert v.runtime is not None


COUNTER = timed_kernels.counted(2)


def test_state_kept_in_a_buffer_is_restored_before_every_replayed_call(
    ev: Evaluator, relu: Problem
) -> None:
    """In its own process this candidate fails from its third call (the counter); the recipe is
    recorded at its second correctness call, with the counter at 1 as a constant, and every
    replayed call starts from that counter: correctness trial 2 then fails in the candidate's
    own process already (its counter reached 2), which rejects it before any replay."""
    v = ev.evaluate(relu, COUNTER)
    assert v.status is Status.NUMERICAL_MISMATCH, v.message
