"""A timing process whose CUDA context broke is ended, not asked again: its reply to a load or a
timing (illegal memory access, unspecified launch failure, a device-side assert ...) raises
TimerDied after the process is forgotten, so the evaluator times the candidate once more in a
fresh process; other failures (a reference that raises, out of memory) keep their meaning.
The process is a stand-in here (the replies are a GPU's); tests/gpu/test_devshare_gpu.py and the
GPU legit corpus run the real one."""

from __future__ import annotations

import pytest

from tritonforge.evaluation.judge.admission import JudgeOutOfMemory
from tritonforge.evaluation.judge.ref_timer import RefTimer
from tritonforge.evaluation.judge.timer_replies import ReferenceUnusable, TimerDied, context_lost

ILLEGAL = {
    "ok": False,
    "status": "runtime_error",
    "message": "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
}


@pytest.mark.parametrize(
    "reply",
    [
        ILLEGAL,
        {"ok": False, "status": "illegal_memory_access", "message": "fault"},
        {
            "ok": False,
            "status": "runtime_error",
            "message": "CUDA error: unspecified launch failure",
        },
        {"ok": False, "status": "runtime_error", "message": "device-side assert triggered"},
    ],
)
def test_sticky_errors_are_context_losses(reply) -> None:
    assert context_lost(reply)


@pytest.mark.parametrize(
    "reply",
    [
        {"ok": False, "status": "runtime_error", "message": "shape mismatch"},
        {"ok": False, "status": "out_of_resources", "message": "CUDA out of memory."},
        {  # torch's hint on every CUDA error, sticky or not
            "ok": False,
            "status": "runtime_error",
            "message": "CUDA error: invalid configuration argument\nCompile with "
            "`TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        },
        {  # out of memory with the figures: the judge's to retry alone, never a restart
            "ok": False,
            "message": "CUDA error: out of memory ... device-side assertions.",
            "memory": {"free": 0},
        },
    ],
)
def test_other_failures_are_not(reply) -> None:
    assert not context_lost(reply)


class _Session:
    def __init__(self) -> None:
        self.closed = False

    def close(self, wait_s: float = 0.0):
        self.closed = True
        return None


def _timer() -> RefTimer:
    return RefTimer("cuda:0", lambda: None, lambda: {}, 0, 1 << 30)


def test_a_broken_context_ends_the_process_and_raises_timer_died() -> None:
    timer = _timer()
    session = timer.session = _Session()
    timer.entries["k"], timer.cases["k"] = 1, "case"
    with timer.lock, pytest.raises(TimerDied, match="CUDA context broke"):
        timer._check(ILLEGAL, "timing the reference")
    assert session.closed and timer.session is None and timer.deaths == 1
    assert not timer.entries and not timer.cases  # nothing loaded is assumed any more


def test_other_failures_keep_the_process() -> None:
    timer = _timer()
    session = timer.session = _Session()
    with timer.lock, pytest.raises(ReferenceUnusable):
        timer._check({"ok": False, "status": "runtime_error", "message": "bad"}, "loading")
    with timer.lock, pytest.raises(JudgeOutOfMemory):
        timer._check({"ok": False, "message": "oom", "memory": {"free": 0}}, "loading")
    assert timer.session is session and not session.closed and timer.deaths == 0


def test_timing_a_reference_the_process_no_longer_holds_is_timer_died() -> None:
    """Another evaluation ended the process between this one's `prepare` and `time`: the
    timing is retried (TimerDied), not reported as an unusable reference."""
    timer = _timer()
    timer.session = _Session()
    with pytest.raises(TimerDied, match="restarted"):
        timer.time("k", False, None, (1, 2, 0.0), "cuda_events", 1.0)
