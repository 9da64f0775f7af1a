"""The re-check after timing: the candidate may have changed state while it was timed.

Covers: `recheck` (its result a verdicts.Recheck: a rejection or none, and notes). The re-check's
case is built once the timing case is released (one case at a time, as admission counts). A
candidate's own worker (CUDA backend: not replayed) is checked once more on fresh inputs, fully
audited (a candidate that behaves only while profiled is profiled right after), with the rules of
a correctness trial (trials.judge_trial, with no launch history: neither the constant-output nor
the in-place rule), then the timing rules of decide.py (`cached_result`, `launch_mismatch`:
timed calls that launched differently from the profiled ones, the roofline and the plausible
speedup); wrong outputs now are `changed_after_timing`. A replayer (trusted, its state restored
before every call) gets one more replay on fresh inputs (replay.check: a Stop if wrong) and the
plausibility rules.
Does not cover: the timing (gpu_timing.py), the rules themselves (decide.py).
"""

from __future__ import annotations

import os
import time

from tritonforge.evaluation.judge import replay, replies
from tritonforge.evaluation.judge.candidate import CandidateRun, Stop, failure_verdict
from tritonforge.evaluation.judge.decide import (
    audit_switches,
    changed_after_timing,
    decide_timing,
    implausible_note,
)
from tritonforge.evaluation.judge.gpu_timing import Timed
from tritonforge.evaluation.judge.reference import Case
from tritonforge.evaluation.judge.requests import Run
from tritonforge.evaluation.judge.timing import device_peaks
from tritonforge.evaluation.judge.tools import JudgeTools
from tritonforge.evaluation.judge.trials import audited, judge_trial
from tritonforge.evaluation.judge.verdicts import Recheck, Rejection
from tritonforge.types import Status

POST_SEED = 1001  # the re-check's hidden seed: seed(problem, POST_SEED); the timing's is 1000


def recheck(tools: JudgeTools, run: CandidateRun, timed: Timed) -> Recheck:
    """The re-check on fresh inputs of the last input distribution; a Stop if it fails."""
    s = run.settings
    post = tools.case(run.phases, run.ref, tools.seed(run.problem, POST_SEED), s.distributions[-1])
    t = time.monotonic()
    got = _recheck(tools, run, timed, post)
    run.phases["recheck"] = time.monotonic() - t
    return got


def _recheck(tools: JudgeTools, run: CandidateRun, timed: Timed, post: Case) -> Recheck:
    """The replayer's replay and plausibility rules, or the worker's audited call judged by
    judge_trial (no history), the timing rules, and `changed_after_timing` for wrong outputs."""
    s = run.settings
    if run.replayer is not None:
        replay.check(tools, run, s.replay_trials, case=(post, s.distributions[-1]))
        return _timing_rules(timed, run)
    carry, carry_fds = run.session.transport.send(post)
    reply, fds = run.ask(
        Run(carry, **audit_switches()), carry_fds, s.budgets.correctness_s, "correctness"
    )
    if isinstance(reply, replies.Failure):
        for fd in fds:
            os.close(fd)
        raise Stop(failure_verdict(reply, "correctness", True))
    outputs = run.outputs(reply.outputs, fds)
    reply = audited(tools, run, post, reply)
    got = judge_trial(run, reply, outputs, post, None)
    if got.hack:
        return Recheck(Rejection(*got.hack))
    checked = _timing_rules(
        timed, run, timed.rounds.launches, got.status is Status.CORRECT,
        signatures=[*timed.rounds.signatures, reply.facts.signature],
        history=run.signatures[1:],
    )  # fmt: skip
    if checked.rejection is None and got.status is not Status.CORRECT:
        rule, message = changed_after_timing(got.status, got.why)
        return Recheck(Rejection(rule, message, got.mismatch), checked.notes)
    return checked


def _timing_rules(
    timed: Timed,
    run: CandidateRun,
    launches: list[int] | None = None,
    still_correct: bool = True,
    signatures: list[str] | None = None,
    history: list[str] | None = None,
) -> Recheck:
    """decide.decide_timing on the timing's result (`launches` None: a replayer's, no launch
    rules), and the note of a speedup flagged, not rejected, as implausible when no rule
    fires."""
    s = run.settings
    peaks = device_peaks(run.device) if run.device.startswith("cuda") else None
    records = run.records if launches is not None else []
    hack = decide_timing(
        timed.result, launches or [], records, still_correct, run.problem, timed.nbytes, s,
        peaks, signatures=signatures, history=history,
    )  # fmt: skip
    if hack:
        return Recheck(Rejection(*hack))
    note = implausible_note(timed.result, s)
    return Recheck(notes=(note,) if note else ())
