"""Timing a correct candidate against its reference.

Covers: `time_candidate` (its result a `Timed`: timings, speedups and intervals as a
verdicts.TimingResult (`timing_result`), the rounds and the case's bytes for the re-check).
Before timing, the timing case is built and the
device's trusted timing process loads the reference (ref_timer.py; shared access of the device).
Then, with exclusive access of the device (device_gate.py: no correctness run, compile or judge
work of ours on it meanwhile), rounds interleave the candidate's worker and the timing process,
alternating which goes first (ABBA), both running the same timing code in the same kind of
process (sandbox/timing_loop.py: L2 flush, CUDA-event device time of the call queued behind a
device-side lead, floored by host time). The
first trial of each side is dropped; speedups are ratios of medians with a 95% bootstrap
interval. If the timing process dies, it is restarted and the candidate timed again once; a
second death is a `judge_fault`. Every timed call of the candidate reports its launch signature
(timing_loop.py), for the re-check's rules (recheck.py). A replayer's timed calls must return
what checked calls do (`timed_output_mismatch`). What it uses of the Evaluator comes as one
`tools.JudgeTools`.
Does not cover: the re-check after timing (recheck.py), the timing loop
(sandbox/timing_loop.py), statistics (timing.py).
"""

from __future__ import annotations

import functools
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch

from tritonforge.evaluation.judge import replies
from tritonforge.evaluation.judge.candidate import CandidateRun, Stop, failure_verdict
from tritonforge.evaluation.judge.compare import compare_to_reference, output_bytes
from tritonforge.evaluation.judge.gpu_lock import judge_device
from tritonforge.evaluation.judge.group_timing import Member
from tritonforge.evaluation.judge.ref_timer import RefTimer
from tritonforge.evaluation.judge.reference import Case
from tritonforge.evaluation.judge.replies import TimeReply
from tritonforge.evaluation.judge.requests import Time
from tritonforge.evaluation.judge.resources import DeviceResources
from tritonforge.evaluation.judge.timer_replies import ReferenceUnusable, TimerDied
from tritonforge.evaluation.judge.timing import bootstrap_ratio_ci, stats
from tritonforge.evaluation.judge.tools import JudgeTools
from tritonforge.evaluation.judge.verdicts import TimingResult
from tritonforge.evaluation.sandbox.protocol import DEVICE_CLOCKS, TRIAL_PARTS
from tritonforge.logging_setup import get_logger
from tritonforge.types import Status, Verdict

progress = get_logger("evaluation.progress")  # see judge.progress


@dataclass
class Rounds:
    """Trials of one timing, first trial of each side dropped."""

    cand: list[float] = field(default_factory=list)
    base: list[float] = field(default_factory=list)
    comp: list[float] = field(default_factory=list)
    cand_host: list[float] = field(default_factory=list)
    base_host: list[float] = field(default_factory=list)
    comp_host: list[float] = field(default_factory=list)
    launches: list[int] = field(default_factory=list)
    signatures: list[str] = field(default_factory=list)  # every timed call's, first ones too
    clocks: set[str] = field(default_factory=set)
    exposed: dict[str, int] = field(default_factory=dict)  # host-bound trials, by side
    asked: int = 0  # timed trials per side asked for (long calls get fewer: perf_round_ms)


@dataclass(frozen=True)
class Timed:
    """A timing's result, its rounds (launches and signatures of the timed calls, for the
    re-check's rules) and the timing case's bytes (the roofline's traffic)."""

    result: TimingResult
    rounds: Rounds
    nbytes: int


def timed_distribution(s: Any) -> str:
    """The input distribution timed calls get: `heavy` where the trials check it, else the
    trials' first. Not `native`: a kernel may tell the draws apart from a few elements and take
    a shortcut on native inputs only (a subsample of a mean within a loose preset's tolerance,
    attacks_open/r2_native_subsample_mse.py); heavy's spikes fail such shortcuts, so what is
    timed is the work that passes there. Kernel runtimes do not depend on the values drawn
    (the reference is timed on the same inputs)."""
    dists = list(s.distributions)
    return "heavy" if "heavy" in dists else dists[0]


def time_candidate(tools: JudgeTools, run: CandidateRun, group: Member | None = None) -> Timed:
    """Time a correct candidate: its timings, speedups and their intervals. With a `group`
    (group_timing.TimingGroup: candidates of one problem judged together), its timing is one
    interleaved round-robin with the other members ready at the same time. A Stop when the
    timing fails."""
    problem, ref, s = run.problem, run.ref, run.settings
    progress.debug(
        "timing: %d rounds against the reference (device's timing process)", s.perf_rounds
    )
    case = tools.case(run.phases, ref, tools.seed(problem, 1000), timed_distribution(s))
    res = tools.resources(run.device)
    t = time.monotonic()
    if group is not None:
        rounds = group.time(run, functools.partial(timed_together, res, case=case, t0=t))
    else:
        rounds = timed_together(res, [run], case, t)[0]
    if isinstance(rounds, Stop):
        raise rounds
    run.phases["timing"] = time.monotonic() - t
    return Timed(timing_result(rounds, s.bootstrap_samples), rounds, case_bytes(case))


def timed_together(
    res: DeviceResources, runs: list[CandidateRun], case: Case, t0: float
) -> list[Rounds | Stop]:
    """The timing of `runs` (candidates of one problem, each in its replayer) against one
    reference, in interleaved rounds; a timing process that dies is restarted and the timing
    tried once more. Per run its Rounds, or the Stop that ended it."""
    deadline = t0 + max(r.settings.budgets.timing_s for r in runs)
    for attempt in (1, 2):
        try:
            return _timed_rounds(res, runs, case, deadline)
        except TimerDied as exc:
            for r in runs:
                r.notes.append(f"timing attempt {attempt}: {exc}; timing process restarted")
        except ReferenceUnusable as exc:
            return [Stop(_judge_fault(f"the reference could not be timed: {exc}"))] * len(runs)
    return [Stop(_judge_fault("the reference timing process died twice; not timed"))] * len(runs)


def _judge_fault(message: str) -> Verdict:
    return Verdict(status=Status.JUDGE_FAULT, phase="timing", message=message)


def _timed_rounds(
    res: DeviceResources, runs: list[CandidateRun], case: Case, deadline: float
) -> list[Rounds | Stop]:
    s = runs[0].settings
    timer: RefTimer = res.timer
    left = max(0.1, deadline - time.monotonic())
    with res.gate.shared() as waited:  # loading and first calls are not timed work
        t = time.monotonic()
        key = timer.prepare(runs[0].ref, case, s.compile_baseline, left, runs[0].phases)
        for r in runs:
            r.waited += waited
            r.phases["timer_load"] += time.monotonic() - t
    try:  # pinned: no other evaluation's prepare evicts it before it is timed
        return _rounds(res, runs, case, deadline, key)
    finally:
        timer.release(key)


def _rounds(
    res: DeviceResources, runs: list[CandidateRun], case: Case, deadline: float, key: str
) -> list[Rounds | Stop]:
    """The alternating timed rounds of the candidates and the loaded reference `key`: per round
    each side once, in an order reversed every other round and rotated among the candidates;
    the reference's (and compiled reference's) samples are shared by every candidate. A
    candidate whose round fails leaves the rounds with its Stop."""
    s = runs[0].settings
    timer: RefTimer = res.timer
    per_round = max(2, s.perf_trials // s.perf_rounds)
    shared = Rounds(asked=per_round * s.perf_rounds - 1)
    outs: list[Rounds | Stop] = [
        Rounds(asked=shared.asked, base=shared.base, comp=shared.comp, base_host=shared.base_host,
               comp_host=shared.comp_host)
        for _ in runs
    ]  # fmt: skip
    with res.gate.exclusive() as waited, _on(runs[0].device):
        deadline += waited
        t = time.monotonic()
        for r in range(s.perf_rounds):
            warm, skip = (s.perf_warmup, 1) if r == 0 else (1, 0)
            live = [i for i, o in enumerate(outs) if isinstance(o, Rounds)]
            if not live:
                break
            turn = live[r % len(live) :] + live[: r % len(live)]
            sides: list[Any] = [*turn, "base"] + (["comp"] if s.compile_baseline else [])
            for side in sides if r % 2 == 0 else sides[::-1]:
                budget = max(0.1, deadline - time.monotonic())
                t_req = time.monotonic()
                if side in ("base", "comp"):
                    reply = timer.time(
                        key, side == "comp", case, (warm, per_round, s.perf_round_ms),
                        s.timing_clock, budget,
                    )  # fmt: skip
                    for i in live:
                        _round_phases(runs[i].phases, time.monotonic() - t_req, reply)
                    _record(shared, side, reply, skip)
                    for i in live:
                        if isinstance(outs[i], Rounds):
                            outs[i].clocks.add(reply.clock)
                            if reply.exposed > 0:
                                outs[i].exposed[side] = outs[i].exposed.get(side, 0) + reply.exposed
                    continue
                run = runs[side]
                try:
                    reply = _candidate_round(run, case, warm, per_round, budget)
                except Stop as stop:
                    outs[side] = stop
                    continue
                _round_phases(run.phases, time.monotonic() - t_req, reply)
                out = outs[side]
                out.launches += list(reply.launches[skip:])
                out.signatures += list(reply.signatures[:per_round])
                _record(out, "cand", reply, skip)
        for run in runs:
            run.waited += waited
            run.phases["timed_rounds"] += time.monotonic() - t
    return outs


def _record(out: Rounds, side: str, reply: TimeReply, skip: int) -> None:
    getattr(out, side).extend(reply.times_ms[skip:])
    getattr(out, f"{side}_host").extend(reply.host_ms[skip:])
    out.clocks.add(reply.clock)
    if reply.exposed > 0 and side == "cand":
        out.exposed[side] = out.exposed.get(side, 0) + reply.exposed


def _round_phases(phases: defaultdict[str, float], wall: float, reply: TimeReply) -> None:
    """Where a timed round's time goes (diagnostics only, never a decision): `round_requests`
    the requests' walls seen here, `round_loops` the process's own wall of its warmup and
    trials, `round_device` the timed calls' times, and the trials' host time by part
    (`round_flush`, ... : protocol.TRIAL_PARTS), the largest lead a request began and ended
    with, the trials that outlasted their lead, the leads' sums (asked, slept, the host's
    enqueue under them) and the requests whose call waited for the device (timing_loop.Lead).
    Every figure is parsed already (replies.py: finite, not negative); sums are capped."""

    def capped(x: float) -> float:
        return min(x, 1e7)

    phases["round_requests"] += wall
    phases["round_loops"] += capped(reply.loop_ms) / 1e3
    phases["round_device"] += sum(capped(t) for t in reply.times_ms) / 1e3
    for name in TRIAL_PARTS:
        phases[f"round_{name}"] += capped(reply.parts_ms.get(name, 0.0)) / 1e3
    for name in ("lead_ms", "first_lead_ms"):  # the largest lead, first and last of a request
        phases[f"round_{name}_max"] = max(phases[f"round_{name}_max"], capped(getattr(reply, name)))
    phases["round_exposed"] += reply.exposed  # trials over their lead
    for name in ("asked", "device", "enqueue"):  # the leads asked for, as slept, the enqueue
        phases[f"round_lead_{name}"] += capped(reply.leads_ms.get(name, 0.0)) / 1e3
    phases["round_synced"] += reply.synced  # requests whose call waits for the device


def _on(device: str) -> Any:
    return torch.cuda.device(device) if device.startswith("cuda") else _Null()


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _candidate_round(
    run: CandidateRun, case: Case, warm: int, trials: int, budget: float
) -> TimeReply:
    carry, carry_fds = run.session.transport.send(case)
    tol = None
    if run.replayer is not None:  # every timed call of the replay checked (timing_loop.Consistency)
        tol = tuple((d, run.settings.tolerance(d)) for d in ("float64", "float32", "float16",
                                                             "bfloat16"))  # fmt: skip
    req = Time(carry, warm, trials, run.settings.perf_round_ms, run.settings.timing_clock, tol)
    reply, extra = run.ask(req, carry_fds, budget, "timing")
    if isinstance(reply, replies.Failure):
        for fd in extra:
            os.close(fd)
        raise Stop(failure_verdict(reply, "timing", True))
    _check_kept(run, case, reply, extra)
    return reply


def _check_kept(run: CandidateRun, case: Case, reply: TimeReply, fds: list[int]) -> None:
    """A replay's timed calls do the work of checked calls: the first timed call's outputs
    (sent back) must be right, and the replayer found every later one equal to it (a kernel that
    counts its calls, or reads the clock, and skips work when it believes it is timed, is caught
    here). Closes `fds`."""
    if run.replayer is not None and (reply.diverged or not reply.kept):
        for fd in fds:
            os.close(fd)
        raise Stop(Verdict(
            status=Status.REWARD_HACK, rule="timed_output_mismatch", phase="timing",
            compiled=True, message=f"{reply.diverged} timed call(s) of the replayed kernels "
            "returned other outputs than the first timed call: timed calls must do the work of "
            "checked calls",
        ))  # fmt: skip
    try:
        for item in reply.kept[: len(fds)]:
            outputs = run.outputs(item.outputs, [fds.pop(0)])
            with judge_device(run.device):
                status, mm, why = compare_to_reference(case, outputs, run.settings, run.problem)
            if status is not Status.CORRECT:
                raise Stop(Verdict(
                    status=Status.REWARD_HACK, rule="timed_output_mismatch", phase="timing",
                    mismatch=mm, compiled=True, message="the first timed call of the replayed "
                    f"kernels returned wrong outputs ({why}): timed calls must do the work of "
                    "checked calls",
                ))  # fmt: skip
    finally:
        for fd in fds:
            os.close(fd)


_SIDES = {"cand": "candidate", "base": "reference", "comp": "compiled reference"}


def timing_result(r: Rounds, samples: int) -> TimingResult:
    """Timings, speedups and intervals; host times for every side unless all used events."""
    events = len(r.clocks) == 1 and r.clocks <= DEVICE_CLOCKS and len(r.cand_host) == len(r.cand)
    cand, base, comp = (
        (r.cand, r.base, r.comp) if events else (r.cand_host, r.base_host, r.comp_host)
    )
    if not cand or not base:
        return TimingResult(notes=("timing produced no usable trials",))
    notes = [
        f"timing: {n} timed call(s) of the {_SIDES[side]} outlasted the device lead "
        "(host-bound: its launch gaps are counted)"
        for side, n in sorted(r.exposed.items())
    ]
    if r.asked and min(len(cand), len(base)) < r.asked:
        notes.append(
            f"timing: long calls, fewer trials (perf_round_ms): {len(cand)} of the candidate, "
            f"{len(base)} of the reference, of {r.asked} asked"
        )
    runtime, ref_runtime = stats(cand, False), stats(base, False)
    speedup = speedup_ci = compiled = vs_compile = vs_compile_ci = None
    if runtime.median_ms > 0:
        speedup = ref_runtime.median_ms / runtime.median_ms
        speedup_ci = bootstrap_ratio_ci(base, cand, samples)
    if comp and runtime.median_ms > 0:
        compiled = stats(comp, False)
        vs_compile = compiled.median_ms / runtime.median_ms
        vs_compile_ci = bootstrap_ratio_ci(comp, cand, samples)
    return TimingResult(
        runtime=runtime,
        ref_runtime=ref_runtime,
        ref_compile_runtime=compiled,
        speedup=speedup,
        speedup_ci=speedup_ci,
        speedup_vs_compile=vs_compile,
        speedup_vs_compile_ci=vs_compile_ci,
        timing_clock=next(iter(r.clocks)) if events else "host",
        notes=tuple(notes),
    )


def case_bytes(case: Case) -> int:
    """Bytes of a case's inputs and expected outputs (the roofline's traffic)."""
    inputs = sum(x.numel() * x.element_size() for x in case.inputs if isinstance(x, torch.Tensor))
    return inputs + output_bytes(case.expected)
