"""The phases' results as frozen records, and the one place a Verdict is assembled from them.

Covers: `Passed` (the correctness phase: every trial passed, and the trusted replay where there
is one), `Rejection` (a rule that fired after that: the replayed share, a timing rule, the
re-check after timing), `ShareResult` (hybrid mode's share of the replayed recipe),
`TimingResult` (timings, speedups, their intervals, the timing's notes), `Recheck` (the
re-check's rejection or nothing, and its notes); `judged` (the verdict of a candidate that
passed its trials, from those results) and `finish` (any verdict, also one a phase ended with
(`candidate.Stop`), completed with what the whole evaluation observed: the device, the run's
notes, the remarks of notes.py, the worker's output tails, the phase seconds, the CPU note).
Nothing here decides: the rules are decide.py's, the phases' are in trials.py, replay.py and
gpu_timing.py.
Does not cover: the Evaluator's own additions (retries, preset, wall time: evaluator.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from tritonforge.types import Audit, Mismatch, Status, Timing, Verdict

CPU_UNTIMED = (
    "timing not measured: the CPU Triton interpreter checks correctness only; speedup is null"
)
CPU_TIMED = "timed on the CPU interpreter (time_on_cpu): says nothing about GPU speed"
PASSED = "all correctness trials passed"


@dataclass(frozen=True)
class Passed:
    """Every correctness trial passed (and the replay, when replayed): the trials run, whether a
    kernel ran, the audit summary (what the replay ran, when replayed)."""

    trials: int
    compiled: bool
    audit: Audit


@dataclass(frozen=True)
class Rejection:
    """A reward-hack rule that fired after the correctness trials had passed."""

    rule: str
    message: str
    mismatch: Mismatch | None = None


@dataclass(frozen=True)
class ShareResult:
    """Hybrid mode: the custom-kernel share of the replayed recipe, and the minimum-share
    rule's rejection, if it fired."""

    share: float | None
    rejection: Rejection | None = None


@dataclass(frozen=True)
class TimingResult:
    """What the timing measured (all None when it produced no usable trials) and its notes."""

    runtime: Timing | None = None
    ref_runtime: Timing | None = None
    ref_compile_runtime: Timing | None = None
    speedup: float | None = None
    speedup_ci: list[float] | None = None
    speedup_vs_compile: float | None = None
    speedup_vs_compile_ci: list[float] | None = None
    timing_clock: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Recheck:
    """The re-check after timing: the rule that fired (None: none did) and its notes."""

    rejection: Rejection | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Remarks:
    """What notes.explain adds to any verdict: notes and two facts of the problem."""

    notes: tuple[str, ...] = ()
    nondeterministic: bool = False
    degenerate: str | None = None


def judged(
    passed: Passed,
    share: ShareResult | None = None,
    timing: TimingResult | None = None,
    recheck: Recheck | None = None,
) -> Verdict:
    """The verdict of a candidate whose correctness trials passed: correct, unless the replayed
    share or the re-check rejected it (a reward hack; its timings stay on the verdict)."""
    audit = passed.audit
    if share is not None:
        basis = "work" if share.share is not None else None
        audit = audit.model_copy(update={"custom_share": share.share, "share_basis": basis})
    rejection = share.rejection if share is not None else None
    rejection = rejection or (recheck.rejection if recheck is not None else None)
    timed = timing or TimingResult()
    return Verdict(
        status=Status.REWARD_HACK if rejection else Status.CORRECT,
        rule=rejection.rule if rejection else None,
        message=rejection.message if rejection else PASSED,
        mismatch=rejection.mismatch if rejection else None,
        compiled=passed.compiled,
        trials_total=passed.trials,
        trials_passed=passed.trials,
        audit=audit,
        runtime=timed.runtime,
        ref_runtime=timed.ref_runtime,
        ref_compile_runtime=timed.ref_compile_runtime,
        speedup=timed.speedup,
        speedup_ci=timed.speedup_ci,
        speedup_vs_compile=timed.speedup_vs_compile,
        speedup_vs_compile_ci=timed.speedup_vs_compile_ci,
        timing_clock=timed.timing_clock,
        notes=[*timed.notes, *(recheck.notes if recheck is not None else ())],
    )


@dataclass(frozen=True)
class Observed:
    """What the whole evaluation observed, for `finish`."""

    device: str
    notes: list[str]  # the run's notes (sandbox warnings, replay, timing attempts), in order
    remarks: Remarks
    stdout: str
    stderr: str
    phases: defaultdict[str, float]
    cpu_timed: bool  # time_on_cpu was asked for


def finish(v: Verdict, seen: Observed) -> Verdict:
    """`v` (the one a phase ended with, or `judged`'s) completed: the run's notes first (sandbox
    warnings always), then `v`'s own not among them, the remarks, and on the CPU what its timing
    says."""
    notes = seen.notes + [n for n in v.notes if n not in seen.notes] + list(seen.remarks.notes)
    if seen.device == "cpu":
        notes.append(CPU_TIMED if seen.cpu_timed and v.runtime is not None else CPU_UNTIMED)
    return v.model_copy(
        update={
            "device": seen.device,
            "notes": notes,
            "reference_nondeterministic": v.reference_nondeterministic
            or seen.remarks.nondeterministic,
            "degenerate": v.degenerate
            if seen.remarks.degenerate is None
            else seen.remarks.degenerate,
            "stdout_tail": seen.stdout,
            "stderr_tail": seen.stderr,
            "phase_seconds": {k: round(x, 4) for k, x in seen.phases.items()},
        }
    )
