"""One admitted evaluation, phase by phase, each returning its result; the Verdict built at the end.

Covers: `Job` (what the Evaluator hands over once the evaluation is admitted on its device: the
problem, the source, the settings, the reference, the trial plan, the phase seconds so far, its
timing group's member) and `judge_admitted`: spawn a sandboxed worker, then load → correctness
trials and the replay (trials.py, replay.py) → hybrid mode's share of the replayed recipe
(`replayed_share`) → timing (gpu_timing.py) → the re-check after it (recheck.py), each a value (`Passed`,
`ShareResult`, `TimingResult`, `Recheck`: verdicts.py) or a `Stop` with the verdict it ended
with; then the worker and the replayer are closed and the Verdict is assembled once
(verdicts.judged, notes.explain, verdicts.finish).
Does not cover: static checks, the reference, admission and retries (evaluator.py), the rules
(decide.py).
"""

from __future__ import annotations

import shutil
import time
from collections import defaultdict
from dataclasses import dataclass

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.candidate import CandidateRun, Stop
from tritonforge.evaluation.judge.gpu_timing import time_candidate
from tritonforge.evaluation.judge.group_timing import Member
from tritonforge.evaluation.judge.notes import explain
from tritonforge.evaluation.judge.recheck import recheck
from tritonforge.evaluation.judge.reference import Reference
from tritonforge.evaluation.judge.replay import close as close_replayer
from tritonforge.evaluation.judge.replay import recipe_ops
from tritonforge.evaluation.judge.session import Session
from tritonforge.evaluation.judge.tools import JudgeTools
from tritonforge.evaluation.judge.transport import Transport
from tritonforge.evaluation.judge.trials import correctness, load
from tritonforge.evaluation.judge.verdicts import (
    Observed,
    Rejection,
    ShareResult,
    finish,
    judged,
)
from tritonforge.evaluation.judge.workerenv import private_scratch, worker_spec
from tritonforge.logging_setup import get_logger
from tritonforge.types import Problem, Status, Verdict

progress = get_logger("evaluation.progress")  # see evaluator.progress


@dataclass(frozen=True)
class Job:
    """An admitted evaluation. `phases`: the judge's own seconds so far (reference load, the
    first case when admission measured the footprint), to which this run's are added."""

    problem: Problem
    source: str
    settings: EvalSettings
    device: str
    ref: Reference
    plan: list[tuple[int, str]]  # (hidden seed, input distribution) per trial
    phases: defaultdict[str, float]
    waited: float = 0.0  # seconds waited for admission
    preimports: tuple[str, ...] = ()  # Inductor runtime modules to import first
    member: Member | None = None  # timed with the rest of its group


@dataclass(frozen=True)
class Judged:
    """The verdict, and whether a worker's request failed for lack of device memory with an
    out-of-resources verdict (the Evaluator may judge it again alone)."""

    verdict: Verdict
    device_oom: bool


def judge_admitted(tools: JudgeTools, job: Job) -> Judged:
    """The evaluation proper, with the device memory it needs reserved: a Verdict always."""
    s, device, phases = job.settings, job.device, job.phases
    progress.debug("spawn: starting a sandboxed worker")
    scratch = None if s.sandbox != "rlimits" else private_scratch()
    spec = worker_spec(s, device, scratch)
    if job.waited > 0.001:
        phases["admission_wait"] = job.waited
    t = time.monotonic()
    server = tools.resources(device).ensure_server()  # started on first use: not a spawn
    if time.monotonic() - t > 0.01:
        phases["fork_server_start"] = time.monotonic() - t
    t = time.monotonic()
    session = Session(server, spec, s.limits.output_bytes)
    session.transport = Transport(device, s.transport)
    phases["spawn"] = time.monotonic() - t
    run = CandidateRun(job.problem, job.source, s, device, session, job.ref, phases)
    run.timing_member = job.member
    run.preimports = list(job.preimports)
    try:
        v = _phases(tools, run, job.plan)
    except Stop as f:
        v = f.verdict
    finally:
        session.close()
        if run.replayer is not None:
            close_replayer(run.replayer)
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    if run.waited > 0.001:
        phases["gate_wait"] = run.waited
    seen = Observed(
        device=device,
        notes=run.notes,
        remarks=explain(v, run),
        stdout=session.stdout.text(),
        stderr=session.stderr.text(),
        phases=phases,
        cpu_timed=s.time_on_cpu,
    )
    v = finish(v, seen)
    return Judged(v, run.device_oom and v.status is Status.OUT_OF_RESOURCES)


def _phases(tools: JudgeTools, run: CandidateRun, plan: list[tuple[int, str]]) -> Verdict:
    """load → trials (→ replay) → share → timing → re-check; a Stop ends it early."""
    s = run.settings
    progress.debug("import: loading the candidate")
    load(tools, run, tools.case(run.phases, run.ref, *plan[0]))
    passed = correctness(tools, run, plan)
    share = None
    if run.replayer is not None and s.mode == "hybrid":
        share = replayed_share(tools, run, plan[0])
        if share.rejection is not None:
            return judged(passed, share)
    if s.measure_performance and (run.device != "cpu" or s.time_on_cpu):
        timed = time_candidate(tools, run, run.timing_member)
        return judged(passed, share, timed.result, recheck(tools, run, timed))
    return judged(passed, share)


def replayed_share(tools: JudgeTools, run: CandidateRun, first: tuple[int, str]) -> ShareResult:
    """Hybrid: the custom-kernel share from the replayed recipe's PyTorch ops (what the trusted
    replay ran, not what the worker reported), and the minimum-share rule on it (the reference's
    work profiled on the `first` trial's case, if not yet)."""
    assert run.replayer is not None
    ops = recipe_ops(run.replayer.recipe)
    share = tools.shares.replayed(run, ops, lambda: tools.case(run.phases, run.ref, *first))
    need = run.settings.min_custom_share
    if need > 0 and (share is None or share < need):
        return ShareResult(share, Rejection(
            "insufficient_custom_share",
            f"the replayed kernels did {0.0 if share is None else share:.0%} of the work; at "
            f"least {need:.0%} is required",
        ))  # fmt: skip
    return ShareResult(share)
