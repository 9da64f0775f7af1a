"""GPU timing of a candidate against the live reference, and the post-timing re-check.

Covers: `time_candidate` (rounds that interleave the worker's timed calls with the reference's
in the judge process, exclusive per GPU; statistics and speedups; a correctness re-check on fresh
inputs after timing; the timing rules of decide.py). Called by the Evaluator with itself as `ev`
and the candidate's `CandidateRun`. Does not cover: the worker's timing loop (sandbox/worker.py),
statistics (timing.py), the torch.compile baseline (Evaluator.compiled_reference).
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from tritonforge.evaluation.judge.candidate import CandidateRun, Stop, failure_verdict
from tritonforge.evaluation.judge.compare import compare, output_bytes
from tritonforge.evaluation.judge.decide import (
    audit_switches,
    changed_after_timing,
    check_integrity,
    decide_audit,
    decide_timing,
    reclassify,
)
from tritonforge.evaluation.judge.gpu_lock import judge_device
from tritonforge.evaluation.judge.timing import device_peaks, stats
from tritonforge.evaluation.sandbox.protocol import unpack_buffer
from tritonforge.logging_setup import get_logger
from tritonforge.types import Status, Verdict

progress = get_logger("evaluation.progress")  # see judge.progress


def time_candidate(ev: Any, run: CandidateRun, v: Verdict) -> None:
    """Time a correct candidate against the live reference and fill `v` (timings, speedups); a
    timing rule or the post-timing re-check can still turn `v` into a reward hack. `ev` is the
    Evaluator (its reference store, seeds, timing lock, reference timer and compiled baseline)."""
    problem, ref, s, device, session = run.problem, run.ref, run.settings, run.device, run.session
    progress.debug("timing: %d rounds against the live reference", s.perf_rounds)
    case = ev.refs.case(ref, ev.seed(problem, 1000), "native")
    with judge_device(device):  # the reference's inputs: a device-to-device copy of the case
        dev_inputs = list(unpack_buffer(case.desc, case.packed, keep_strides=True))
    per_round = max(2, s.perf_trials // s.perf_rounds)
    cand, base, comp, launches, signatures = [], [], [], [], []
    t = time.monotonic()
    deadline = t + s.budgets.timing_s
    with ev.timing_lock(device), torch.cuda.device(device):
        timer = ev.reference_timer(device)
        compiled_ref = ev.compiled_reference(problem, ref) if s.compile_baseline else None
        if compiled_ref is not None:  # compile outside the judge's device lock (seconds)
            with torch.no_grad():
                compiled_ref(*dev_inputs)
        for r in range(s.perf_rounds):
            warm = s.perf_warmup if r == 0 else 1
            carry, carry_fds = session.transport.send(case)
            reply, extra = run.call(
                {"op": "time", **carry, "warmup": warm, "trials": per_round},
                carry_fds,
                max(0.1, deadline - time.monotonic()),
                "timing",
            )
            for fd in extra:  # the worker attaches nothing to this reply
                os.close(fd)
            if not reply.get("ok"):
                raise Stop(failure_verdict(reply, "timing", True))
            cand += reply["times_ms"][1:] if r == 0 else reply["times_ms"]
            launches += reply["launches"]
            signatures += [str(x) for x in reply.get("signatures") or []]
            # no other judge thread puts work on the device while the reference is timed: its
            # device-wide synchronize would wait for that work too (not held across the worker's
            # round, so a slow candidate cannot stall the judge's other evaluations)
            with judge_device(device):
                base += timer.time(ref.model, dev_inputs, warm, per_round)[(1 if r == 0 else 0) :]
                if compiled_ref is not None:
                    comp += timer.time(compiled_ref, dev_inputs, warm, per_round)[
                        (1 if r == 0 else 0) :
                    ]
    run.phases["timing"] = time.monotonic() - t
    v.runtime, v.ref_runtime = stats(cand, False), stats(base, False)
    v.speedup = v.ref_runtime.median_ms / v.runtime.median_ms if v.runtime.median_ms > 0 else None
    if comp:
        v.ref_compile_runtime = stats(comp, False)
        v.speedup_vs_compile = v.ref_compile_runtime.median_ms / v.runtime.median_ms
    # The candidate may have changed state during timing: check it once more on fresh inputs,
    # fully audited (a candidate that behaves only while profiled is profiled right after).
    post = ev.refs.case(ref, ev.seed(problem, 1001), s.distributions[-1])
    carry, carry_fds = session.transport.send(post)
    reply, fds = run.call(
        {"op": "run", **carry, **audit_switches()},
        carry_fds,
        s.budgets.correctness_s,
        "correctness",
    )
    if not reply.get("ok"):
        for fd in fds:
            os.close(fd)
        raise Stop(failure_verdict(reply, "correctness", True))
    outputs = run.outputs(reply, fds)
    with judge_device(device):
        status, mm, why = compare(
            post.expected, outputs, s.tolerance, s.nan_policy, problem.atol, problem.rtol
        )
    nbytes = sum(
        x.numel() * x.element_size() for x in case.inputs if isinstance(x, torch.Tensor)
    ) + output_bytes(case.expected)
    history = run.signatures[1:]
    facts = reply.get("facts") or {}
    reclassify(reply["audit"])
    reply["audit"]["custom_share"] = ev.share(run, post, reply["audit"])
    signatures.append(str(facts.get("signature")))
    hack = check_integrity(run.armed, reply["audit"]) or decide_audit(
        reply["audit"], facts, s, session.unsolicited, None
    )
    peaks = device_peaks(device)
    hack = hack or decide_timing(
        v,
        launches,
        run.records,
        status is Status.CORRECT,
        problem,
        nbytes,
        s,
        peaks,
        signatures=signatures,
        history=history,
    )
    if hack:
        v.status, v.rule, v.message = Status.REWARD_HACK, hack[0], hack[1]
        v.correct = False
    elif status is not Status.CORRECT:
        v.status, v.mismatch, v.correct = Status.REWARD_HACK, mm, False
        v.rule, v.message = changed_after_timing(status, why)
