"""The lead's sizing (timing_loop.Lead) and the sleep's rate (`_observed_rate`), as pure policy
on the CPU: the lead follows the trials' own enqueue, a host hiccup costs a few long leads, a
host-bound call keeps a lead at least its enqueue, a call that waits for the device inside its
enqueue gets the shortest lead, and the sleep's cycles per ms follow the highest recent rate.
The same loop on a real device: tests/gpu/test_timing_lead_gpu.py."""

from __future__ import annotations

import pytest

from tritonforge.evaluation.sandbox import timing_loop
from tritonforge.evaluation.sandbox.timing_loop import (
    LEAD_FACTOR,
    LEAD_FIT,
    LEAD_MAX_MS,
    LEAD_MIN_MS,
    LEAD_PAD_MS,
    Lead,
    Trial,
)


def _trial(lead: Lead, enqueue: float, synced: bool = False) -> Trial:
    """A trial under `lead.ms`: the device slept what was asked; a call that waits for the device
    returns only after the lead ended."""
    lead_dev = lead.ms
    if synced:
        enqueue += lead_dev
    return Trial(1.0, 1.0, enqueue > lead_dev, enqueue, lead_dev)


def _run(lead: Lead, enqueues: list[float], synced: bool = False) -> list[float]:
    return [lead.after(_trial(lead, e, synced)) for e in enqueues]


def test_the_lead_follows_the_trials_enqueue_down() -> None:
    lead = Lead(2.0)  # a warmup call that was slow to enqueue
    assert lead.ms == LEAD_FACTOR * 2.0
    leads = _run(lead, [0.5] * 5)
    assert leads[-1] == pytest.approx(LEAD_FIT * 0.5 + LEAD_PAD_MS)
    assert not lead.synced


def test_a_hiccup_costs_a_few_long_leads_not_the_rest() -> None:
    lead = Lead(0.5)
    _run(lead, [0.5] * 4)
    settled = lead.ms
    assert lead.after(_trial(lead, 4.0)) >= LEAD_FIT * 4.0  # exposed: doubled, covers it
    after = _run(lead, [0.5] * 3)
    assert after[-1] == pytest.approx(settled)


def test_a_host_bound_call_keeps_a_lead_over_its_enqueue() -> None:
    lead = Lead(0.2)
    leads = _run(lead, [3.0] * 8)
    assert all(ms >= 3.0 for ms in leads[1:])
    assert not lead.synced


def test_a_call_that_waits_for_the_device_gets_the_shortest_lead() -> None:
    lead = Lead(0.3)
    leads = _run(lead, [0.2] * 6, synced=True)
    assert lead.synced and leads[-1] == LEAD_MIN_MS
    assert max(leads) < LEAD_MAX_MS  # found before the lead ran away


def test_the_sleep_rate_follows_the_highest_recent_rate(monkeypatch) -> None:
    monkeypatch.setattr(timing_loop, "_CAL", {"cycles": 345_000.0})  # calibrated at idle clock
    timing_loop._observed_rate(1_000_000, 1.0)  # the clock rose: 1e6 cycles a ms
    assert timing_loop._CAL["cycles"] == 1_000_000.0
    timing_loop._observed_rate(500_000, 1.0)  # a slower moment: keep the highest
    assert timing_loop._CAL["cycles"] == 1_000_000.0
    timing_loop._observed_rate(10, 0.001)  # too short a lead to tell
    timing_loop._observed_rate(60_000, 0.05)  # (a calibration lead: its launch weighs in)
    assert timing_loop._CAL["cycles"] == 1_000_000.0
    for _ in range(timing_loop.LEAD_RECENT):  # the high rate ages out
        timing_loop._observed_rate(700_000, 1.0)
    assert timing_loop._CAL["cycles"] == 700_000.0


def test_a_call_that_waits_for_the_device_found_from_the_longest_lead() -> None:
    """A first lead at the maximum (slow warmup calls) is probed once at half: the enqueue
    follows the lead down, so the call waits for the device."""
    lead = Lead(LEAD_MAX_MS)
    leads = _run(lead, [0.2] * 4, synced=True)
    assert leads[0] == LEAD_MAX_MS / 2 and lead.synced and leads[-1] == LEAD_MIN_MS


def test_a_host_bound_call_at_the_longest_lead_is_probed_once() -> None:
    lead = Lead(LEAD_MAX_MS)
    leads = _run(lead, [1.2 * LEAD_MAX_MS] * 6)
    assert leads == [LEAD_MAX_MS / 2] + [LEAD_MAX_MS] * 5 and not lead.synced


def test_a_later_request_starts_at_the_lead_the_last_one_ended_with(monkeypatch) -> None:
    monkeypatch.setattr(timing_loop, "_CAL", {})
    first = Lead(4.0, key="ref|False|case:1")
    _run(first, [0.5] * 4)
    again = Lead(4.0, key="ref|False|case:1")  # its warmup call was slow again
    assert again.ms == pytest.approx(LEAD_FIT * 0.5 + LEAD_PAD_MS)
    assert Lead(2.0, key="other").ms == LEAD_FACTOR * 2.0 == Lead(2.0).ms
    monkeypatch.setattr(timing_loop, "LEADS_KEPT", 2)
    _run(Lead(1.0, key="b"), [0.5])
    _run(Lead(1.0, key="c"), [0.5])  # full: the kept leads start over
    assert set(timing_loop._CAL["leads"]) == {"c"}


def test_exposed_trials_with_no_lead_to_compare_are_not_a_wait_for_the_device() -> None:
    a = Trial(1.0, 1.0, True, 0.5, 0.0)
    assert not timing_loop._moved_with_lead(a, Trial(1.0, 1.0, True, 0.7, 0.0))
