"""The Verdict assembled once from the phases' results (judge/verdicts.py), and the timing rules'
flagged-speedup note returned rather than written into a verdict (decide.implausible_note).

Covers: `judged` (correct with the trials' audit; the replayed share on the audit; a rejection by
the share or the re-check: a reward hack that keeps its timings; the timing's and the re-check's
notes in order), `finish` (the run's notes first, the verdict's own not among them after, then
the remarks, then on the CPU what its timing says; device, phase seconds, the problem's facts),
and `implausible_note` / `decide_timing` on a timing result. The phases themselves run in
tests/eval (test_replay, test_timed_audit, test_device_scheduling, the corpora).
"""

from __future__ import annotations

from collections import defaultdict

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge import decide
from tritonforge.evaluation.judge.verdicts import (
    CPU_TIMED,
    CPU_UNTIMED,
    PASSED,
    Observed,
    Passed,
    Recheck,
    Rejection,
    Remarks,
    ShareResult,
    TimingResult,
    finish,
    judged,
)
from tritonforge.types import Audit, Mismatch, Problem, Status, Timing, Verdict

AUDIT = Audit(kernel_launches=2, kernels=["k"], torch_ops={"aten::add": 1})


def _timing(speedup: float = 2.0) -> TimingResult:
    t = Timing(median_ms=1.0, mean_ms=1.0, std_ms=0.0, min_ms=1.0, max_ms=1.0, trials=3)
    return TimingResult(runtime=t, ref_runtime=t, speedup=speedup, speedup_ci=[1.9, 2.1],
                        timing_clock="cuda_events", notes=("timing: one",))  # fmt: skip


def test_a_candidate_that_passed_is_correct_with_its_trials_and_audit() -> None:
    v = judged(Passed(trials=5, compiled=True, audit=AUDIT))
    assert v.status is Status.CORRECT and v.message == PASSED and v.rule is None
    assert (v.trials_total, v.trials_passed, v.compiled) == (5, 5, True)
    assert v.audit == AUDIT and v.runtime is None and v.speedup is None and v.notes == []


def test_the_replayed_share_goes_on_the_audit_and_may_reject() -> None:
    passed = Passed(trials=3, compiled=True, audit=AUDIT)
    v = judged(passed, ShareResult(0.75))
    assert v.status is Status.CORRECT
    assert v.audit.custom_share == 0.75 and v.audit.share_basis == "work"
    assert AUDIT.custom_share is None  # the trials' audit itself is left as it was
    low = judged(passed, ShareResult(None, Rejection("insufficient_custom_share", "too little")))
    assert low.status is Status.REWARD_HACK and low.rule == "insufficient_custom_share"
    assert low.message == "too little" and low.trials_passed == 3 and low.phase is None
    assert low.audit.custom_share is None and low.audit.share_basis is None


def test_a_rejected_recheck_keeps_the_timings_and_both_notes_in_order() -> None:
    mm = Mismatch(trial=0, distribution="native")
    recheck = Recheck(Rejection("changed_after_timing", "wrong after", mm), ("suspicious",))
    v = judged(Passed(trials=5, compiled=True, audit=AUDIT), None, _timing(), recheck)
    assert v.status is Status.REWARD_HACK and v.rule == "changed_after_timing"
    assert v.mismatch == mm and v.message == "wrong after"
    assert v.speedup == 2.0 and v.speedup_ci == [1.9, 2.1] and v.timing_clock == "cuda_events"
    assert v.notes == ["timing: one", "suspicious"]
    fine = judged(Passed(trials=5, compiled=True, audit=AUDIT), None, _timing(), Recheck())
    assert fine.status is Status.CORRECT and fine.runtime is not None and fine.mismatch is None


def _seen(device: str = "cpu", timed: bool = True, remarks: Remarks = Remarks()) -> Observed:
    phases: defaultdict[str, float] = defaultdict(float, {"import": 0.123456, "check": 1e-6})
    return Observed(device, ["sandbox: nobody", "timing attempt 1: died"], remarks, "out", "err",
                    phases, timed)  # fmt: skip


def test_finish_puts_the_runs_notes_first_and_the_remarks_after() -> None:
    v = judged(Passed(trials=1, compiled=True, audit=AUDIT), None, _timing(), Recheck())
    v = v.model_copy(update={"notes": ["sandbox: nobody", *v.notes]})  # a note already the run's
    remarks = Remarks(("degenerate problem",), nondeterministic=True, degenerate="constant")
    done = finish(v, _seen(remarks=remarks))
    assert done.notes == ["sandbox: nobody", "timing attempt 1: died", "timing: one",
                          "degenerate problem", CPU_TIMED]  # fmt: skip
    assert done.device == "cpu" and done.stdout_tail == "out" and done.stderr_tail == "err"
    assert done.phase_seconds == {"import": 0.1235, "check": 0.0}
    assert done.reference_nondeterministic and done.degenerate == "constant"
    assert v.phase_seconds == {} and v.stdout_tail == "" and len(v.notes) == 2  # left as it was


def test_finish_on_a_stopped_verdict_and_off_the_cpu() -> None:
    stopped = Verdict(status=Status.TIMEOUT, phase="compile", message="too long")
    assert finish(stopped, _seen()).notes[-1] == CPU_UNTIMED  # no runtime: untimed
    assert finish(stopped, _seen(timed=False)).notes[-1] == CPU_UNTIMED
    gpu = finish(stopped, _seen(device="cuda:0"))
    assert gpu.notes == ["sandbox: nobody", "timing attempt 1: died"] and gpu.device == "cuda:0"
    assert not gpu.reference_nondeterministic and gpu.degenerate is None
    assert gpu.status is Status.TIMEOUT and gpu.message == "too long"


def test_a_flagged_implausible_speedup_is_a_note_a_rejected_one_a_rule() -> None:
    problem = Problem(id="p", suite="s", name="p", reference_src="")
    flag = EvalSettings(implausible_speedup="flag", max_plausible_speedup=10.0)
    reject = EvalSettings(implausible_speedup="reject", max_plausible_speedup=10.0)
    fast = _timing(speedup=50.0)
    assert decide.decide_timing(fast, [], [], True, problem, 0, flag) is None
    assert decide.implausible_note(fast, flag) == "suspicious: speedup 50.0x above 10x"
    assert decide.decide_timing(fast, [], [], True, problem, 0, reject)[0] == "implausible_speedup"
    assert decide.implausible_note(_timing(speedup=5.0), flag) is None
    assert decide.implausible_note(TimingResult(), flag) is None  # nothing usable was timed
