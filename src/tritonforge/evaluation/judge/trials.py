"""The load and correctness phases: the candidate imported in its worker, then judged trial by trial.

Covers: `load` (import the candidate and build ModelNew in the worker, the shared device buffers
offered), `correctness` (the trials on hidden seeds and input distributions in the plan's order:
budgets in the candidate's own time, one trial also recording forward's work as a recipe, each
trial judged by `judge_trial` and then by the rules only a correctness trial has (constant
output, inputs changed in place); then the trusted replay (replay.evidence), or for the CUDA
backend the note that there is none; the `Passed` result), `audited` (a reply with the judge's
own op classification and work share) and `judge_trial` (one audited call's reply judged:
the audit's integrity, the audit rules of decide.py, the comparison with the reference; used by
the correctness trials and by the re-check after timing, gpu_timing.py). A failure ends the
evaluation with a `Stop` carrying its verdict.
Does not cover: the rules (decide.py, constant.py), the comparison (compare.py), the replay
(replay.py), timing (gpu_timing.py).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Any

from tritonforge.evaluation.judge.candidate import CandidateRun, Stop, failure_verdict
from tritonforge.evaluation.judge.compare import compare_to_reference, tf32_hint
from tritonforge.evaluation.judge.constant import constant_rule
from tritonforge.evaluation.judge.decide import (
    audit_record,
    audit_switches,
    check_integrity,
    decide_audit,
    reclassify,
)
from tritonforge.evaluation.judge.gpu_lock import judge_device
from tritonforge.evaluation.judge.reference import INIT_SEED, Case
from tritonforge.evaluation.judge.replay import (
    Captured,
    evidence,
    replayed_audit,
    take_recipe,
)
from tritonforge.evaluation.judge.replies import Failure, RunReply
from tritonforge.evaluation.judge.requests import Carry, Load, Run
from tritonforge.evaluation.judge.tools import JudgeTools
from tritonforge.evaluation.judge.verdicts import Passed
from tritonforge.evaluation.sandbox.protocol import pack
from tritonforge.logging_setup import get_logger
from tritonforge.types import Mismatch, Status, Verdict

progress = get_logger("evaluation.progress")  # see evaluator.progress
NOT_REPLAYED = (
    "not replayed: CUDA C++ kernels are native code a trusted replay cannot load; correctness "
    "rests on the judge's comparisons, and the timing on the candidate's own process"
)


@dataclass(frozen=True)
class TrialJudgement:
    """What `judge_trial` found: an audit rule that fired (then nothing was compared), or the
    comparison's status with its mismatch and reason."""

    hack: tuple[str, str] | None = None
    status: Status = Status.CORRECT
    mismatch: Mismatch | None = None
    why: str = ""


def judge_trial(
    run: CandidateRun, reply: RunReply, outputs: Any, case: Case, history: list[str] | None
) -> TrialJudgement:
    """One audited call judged: the audit's configuration unchanged since load, the audit rules
    (`history`: the launch signatures of the profiled trials to compare this call's with, None
    for none), then the outputs compared with the reference's. `reply` is `audited` already."""
    audit, facts = reply.audit, reply.facts
    hack = check_integrity(run.armed, audit.integrity) or decide_audit(
        audit, facts, run.settings, run.session.unsolicited, history
    )
    if hack:
        return TrialJudgement(hack=hack)
    with judge_device(run.device):
        status, mm, why = compare_to_reference(case, outputs, run.settings, run.problem)
    return TrialJudgement(status=status, mismatch=mm, why=why)


def audited(tools: JudgeTools, run: CandidateRun, case: Case, reply: RunReply) -> RunReply:
    """`reply` with the judge's glue list applied to its ops (decide.reclassify: not the
    worker's) and the trial's custom-kernel share (tools.shares)."""
    audit = reclassify(reply.audit)
    audit = replace(audit, custom_share=tools.shares.trial(run, case, audit))
    return replace(reply, audit=audit)


def load(tools: JudgeTools, run: CandidateRun, first: Case) -> None:
    """Import the candidate and build ModelNew in the worker; a Stop on failure (the sandbox's
    notes join `run.notes`). The shared device buffers (sized for the `first` case) are offered
    with the request."""
    s, session = run.settings, run.session
    init_desc, init_fd = pack(run.ref.init_inputs)
    shared, shared_fds = session.transport.offer(first)
    req = Load(
        source=run.source,
        init_inputs=init_desc,
        init_seed=INIT_SEED,
        device="cpu" if run.device == "cpu" else "cuda:0",
        backend=s.backend,
        mode=s.mode,
        preimport=tuple(run.preimports),
        shared=shared,
    )
    t = time.monotonic()
    reply, extra = run.ask(req, [init_fd, *shared_fds], s.budgets.import_s, "import")
    for fd in extra:  # the worker attaches nothing to this reply
        os.close(fd)
    run.phases["import"] = time.monotonic() - t
    if isinstance(reply, Failure):
        raise Stop(failure_verdict(reply, "import", False))
    run.phases["cuda_init"] = reply.cuda_init_s
    run.armed = reply.audit.integrity.armed
    tr = session.transport
    tr.accept(reply.shared)
    tools.transport_used("shared" if tr.active else f"memfd: {tr.reason}")
    run.notes += [f"sandbox: {reply.sandbox.user[:300] or 'unknown'}"] + [
        f"sandbox warning: {w[:300]}" for w in reply.sandbox.warnings
    ]
    run.notes += [n[:300] for n in reply.notes[:4]]


def correctness(tools: JudgeTools, run: CandidateRun, plan: list[tuple[int, str]]) -> Passed:
    """Every trial of `plan` (hidden seed, distribution) in the candidate's worker, then the
    replay; a Stop with the first failure's verdict. Afterwards the replayer (if any) holds
    `run.session` and `run.replayer`."""
    s = run.settings
    # the correctness budget is the candidate's own time over the trials after the first:
    # the judge's work between trials (reference outputs, comparison) is not charged to it,
    # nor the time the worker waited for a CPU on a busy machine (budget.py)
    left = s.budgets.correctness_s
    # one trial after the compile also records forward's work as a recipe (judge/replay.py)
    replayable = s.backend == "triton"
    recipe_at = 1 if len(plan) > 1 else 0
    captured: Captured | None = None
    try:  # the recipe's blob fd is closed however this ends (evidence closes it too)
        for i, (seed, dist) in enumerate(plan):
            progress.debug("reference outputs: trial %d/%d (%s inputs)", i + 1, len(plan), dist)
            case = tools.case(run.phases, run.ref, seed, dist)
            recipe = replayable and i == recipe_at
            carry, reply, fds, left = _ask_trial(run, i, len(plan), case, recipe, left)
            if recipe:
                captured = take_recipe(reply.recipe, fds)
            _check_trial(tools, run, i, dist, case, carry, reply, fds)
            # one case at a time: this trial's inputs, expected and copied outputs go before the
            # next case is built (admission counts one; at 8 GiB a side, keeping the last trial's
            # through the timing filled the H200)
            del case
        if replayable:  # the verdict rests on the replay, not on the candidate's process
            progress.debug("replay: the kernels alone, in a trusted replayer, on fresh inputs")
            replayer = evidence(tools, run, captured)
            run.session.close()  # the candidate's process is done with
            run.replayer, run.session = replayer, replayer.session
        else:
            run.notes.append(NOT_REPLAYED)
    finally:
        if captured is not None:
            captured.close()
    audit = audit_record(run.records)
    if run.replayer is not None:  # what the verdict says ran: what the replay ran
        audit = replayed_audit(run.replayer.recipe, audit)
    return Passed(trials=len(plan), compiled=run.compiled, audit=audit)


def _ask_trial(
    run: CandidateRun, i: int, n: int, case: Case, recipe: bool, left: float
) -> tuple[Carry, RunReply, list[int], float]:
    """Trial `i` of `n` sent to the worker within its budget: (how its inputs travelled, the
    reply, its fds, the correctness budget left). A failure reply is a Stop."""
    s = run.settings
    phase = "compile" if i == 0 else "correctness"
    total = s.budgets.compile_s if i == 0 else s.budgets.correctness_s
    carry, carry_fds = run.session.transport.send(case)
    req = Run(carry, **audit_switches(last_trial=i == n - 1), recipe=recipe)
    progress.debug("%s: trial %d/%d", phase, i + 1, n)
    t = time.monotonic()
    budget = total if i == 0 else max(0.1, left)
    waited, cpu_waited = run.waited, run.waited_s
    reply, fds = run.ask(req, carry_fds, budget, phase, total)
    spent = time.monotonic() - t - (run.waited - waited)  # waits for the gate: not its time
    run.phases[phase] += spent
    if i > 0:  # nor its waits for a CPU
        left -= spent - (run.waited_s - cpu_waited)
    # compiled: a kernel launched (the worker's word: it decides only between two failures'
    # rewards, never an acceptance); for the CUDA backend the extension built at import and
    # forward ran (its launches happen inside native code)
    run.compiled = run.compiled or reply.audit.launches_ok > 0
    run.compiled = run.compiled or (s.backend == "cuda" and isinstance(reply, RunReply))
    if isinstance(reply, Failure):
        for fd in fds:
            os.close(fd)
        v = failure_verdict(reply, phase, run.compiled)
        v.trials_total, v.trials_passed = s.correctness_trials, i
        raise Stop(v)
    return carry, reply, fds, left


def _check_trial(
    tools: JudgeTools,
    run: CandidateRun,
    i: int,
    dist: str,
    case: Case,
    carry: Carry,
    reply: RunReply,
    fds: list[int],
) -> None:
    """Trial `i`'s outputs read and judged (its seconds go to phases["check"]); a Stop with
    the verdict it forces (hack, mismatch, mutation)."""
    t = time.monotonic()
    outputs = run.outputs(reply.outputs, fds)
    # the judge's own look at the shared input buffer joins the worker's report
    seen = run.session.transport.mutated(case, carry.shared)
    if seen:
        mutated = sorted(set(reply.facts.mutated) | set(seen))
        reply = replace(reply, facts=replace(reply.facts, mutated=tuple(mutated)))
    reply = audited(tools, run, case, reply)
    run.records.append(reply.audit)
    stop = _trial_verdict(run, i, dist, reply, outputs, case)
    run.phases["check"] += time.monotonic() - t
    if stop is not None:
        if stop.status is Status.NUMERICAL_MISMATCH and run.device != "cpu":
            stop.message += tf32_hint(run.source, case.expected)
        raise Stop(stop)


def _trial_verdict(
    run: CandidateRun, i: int, dist: str, reply: RunReply, outputs: Any, case: Case
) -> Verdict | None:
    """The verdict a finished trial forces (hack, mismatch, mutation), or None to go on."""
    s = run.settings
    phase = "compile" if i == 0 else "correctness"
    common = {
        "compiled": run.compiled,
        "audit": audit_record(run.records),
        "trials_total": s.correctness_trials,
        "trials_passed": i,
    }
    # the first trial's calls may do one-off work (autotuning, a weight layout): not compared
    got = judge_trial(run, reply, outputs, case, run.signatures[1:] if i > 0 else None)
    run.signatures.append(reply.facts.signature)
    if got.hack:
        return Verdict(
            status=Status.REWARD_HACK, rule=got.hack[0], message=got.hack[1], phase=phase, **common
        )
    if got.status is not Status.CORRECT:
        mm = got.mismatch
        mm.trial, mm.distribution = i, dist
        msg = f"trial {i + 1}/{s.correctness_trials} (inputs: {dist}): {got.why}"
        return Verdict(
            status=got.status,
            mismatch=mm,
            message=msg,
            phase="correctness",
            notes=run.notes,
            **common,
        )
    hack = constant_rule(run.trace, run.ref, outputs, case.expected)
    if hack:
        return Verdict(
            status=Status.REWARD_HACK, rule=hack[0], message=hack[1], phase=phase, **common
        )
    mutated = list(reply.facts.mutated)
    if mutated:
        msg = f"forward modified its input(s) {mutated} in place; inputs must be left unchanged"
        return Verdict(status=Status.INPUT_MUTATED, message=msg, phase="correctness", **common)
    return None
