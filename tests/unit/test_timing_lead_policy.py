"""The lead's size from trial to trial (timing_loop.Lead): a hiccup doubles it for a few trials
only, a host that is slower than the warmup showed raises its base, and it stays within
[LEAD_MIN_MS, LEAD_MAX_MS] and never below the warmup's estimate (a lead stretched in warmup
stays stretched: tests/gpu/test_timing_lead_attacks_gpu.py)."""

from __future__ import annotations

from tritonforge.evaluation.sandbox.timing_loop import (
    LEAD_CALM,
    LEAD_FACTOR,
    LEAD_MAX_MS,
    LEAD_MIN_MS,
    Lead,
    Trial,
)


def _trial(enqueue: float, exposed: bool = False) -> Trial:
    return Trial(host=1.0, dev=1.0, exposed=exposed, enqueue=enqueue)


def test_a_hiccup_doubles_the_lead_for_a_few_trials_only() -> None:
    lead = Lead(0.4)
    base = lead.ms
    assert base == LEAD_FACTOR * 0.4
    after = [lead.after(_trial(0.4))]
    after.append(lead.after(_trial(5.0, exposed=True)))  # the machine was busy once
    assert after[-1] == 2 * base
    for _ in range(LEAD_CALM):
        after.append(lead.after(_trial(0.4)))
    assert after[-1] == base  # back where it was
    assert max(after) == 2 * base


def test_repeated_exposure_keeps_doubling_up_to_the_maximum() -> None:
    lead = Lead(0.4)
    for _ in range(20):
        ms = lead.after(_trial(LEAD_MAX_MS * 2, exposed=True))
    assert ms == LEAD_MAX_MS


def test_a_host_slower_than_the_warmup_raises_the_base() -> None:
    lead = Lead(0.1)
    for _ in range(9):
        ms = lead.after(_trial(1.0))
    assert ms == LEAD_FACTOR * 1.0  # the median of the trials' enqueue, not the warmup's
    for _ in range(3):  # a few fast trials do not pull it below the median
        ms = lead.after(_trial(0.1))
    assert ms == LEAD_FACTOR * 1.0


def test_bounds_and_the_warmup_estimate_are_kept() -> None:
    assert Lead(0.0).ms == LEAD_MIN_MS
    stretched = Lead(LEAD_MAX_MS)  # slow warmup calls
    assert stretched.ms == LEAD_MAX_MS
    for _ in range(3 * LEAD_CALM):
        ms = stretched.after(_trial(0.01))  # fast timed calls
    assert ms == LEAD_MAX_MS
