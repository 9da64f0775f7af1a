"""Candidates of one problem timed together (issue 32): one interleaved round-robin of the
reference and every correct candidate of the group, the reference once per round.

Covers, on the CPU with the timing path on (`time_on_cpu`; its numbers mean nothing here):
`Evaluator.evaluate_group` with real workers, replayers and the timing process: four candidates,
three correct and one wrong; the correct ones are timed in one batch, the reference's timing
requests are those of one timing (not one per candidate), every correct verdict has its own
runtime and speedup against the shared reference samples, the wrong one is judged as alone;
verdicts come back in the order of the sources. Does not cover: the scheduling logic apart
(tests/unit/test_group_timing.py), GPU figures (benchmarks/eval_mix.py).
"""

from __future__ import annotations

import pytest

import helpers.hack_corpus as hc
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.evaluation.judge.group_timing import TimingGroup
from tritonforge.evaluation.judge.ref_timer import RefTimer
from tritonforge.types import Status

pytestmark = pytest.mark.slow


def test_a_group_is_timed_in_one_round_robin(monkeypatch: pytest.MonkeyPatch) -> None:
    p = hc.problem("builtin/relu")
    good = p.solution_src
    blocks = [good.replace("BLOCK=1024", f"BLOCK={b}") for b in (256, 512)]
    wrong = good.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.1)")
    sources = [good, blocks[0], wrong, blocks[1]]
    calls: list[str] = []
    real = RefTimer.time

    def counted(self, key, compiled, *args, **kwargs):
        calls.append(key)
        return real(self, key, compiled, *args, **kwargs)

    monkeypatch.setattr(RefTimer, "time", counted)
    group = TimingGroup()
    s = hc.cpu_timing_settings(bootstrap_samples=100)
    with Evaluator(s) as ev:
        verdicts = ev.evaluate_group(p, sources, s, group=group)
    statuses = [v.status for v in verdicts]
    assert statuses == [Status.CORRECT, Status.CORRECT, Status.NUMERICAL_MISMATCH, Status.CORRECT]
    assert group.batches == [3], group.batches
    assert len(calls) == s.perf_rounds  # the reference once per round, for all three
    for v in (verdicts[0], verdicts[1], verdicts[3]):
        assert v.runtime is not None and v.ref_runtime is not None and v.speedup is not None
        assert v.ref_runtime.trials == verdicts[0].ref_runtime.trials  # shared samples
