"""Trusted decisions on what the worker reported: which reward-hack rule fires, if any.

Covers: `decide_audit` (after each correctness trial: blocked actions, PyTorch compute in strict
mode (the worker's op names re-classified with the judge's own glue list; a PyTorch epilogue
after the kernels, `epilogue`, gets its own rule), no launch, outputs not produced by a kernel,
decoy launches, aliasing, broadcast outputs, results cached across calls (the last trial calls
forward twice on the same tensors: poisoned outputs, and the two calls' launch signatures must
match), minimum custom-kernel share in hybrid mode (judge/work.py), unsolicited frames),
`check_integrity` (the audit's configuration as armed, unchanged since load), `decide_timing`
(timed calls that skipped their kernels or launched differently from the profiled calls,
a runtime below the roofline bound under every preset, speedups above the preset's threshold
where it rejects them; `implausible_note` where it flags them), `changed_after_timing` (wrong
after the timing loop although every trial passed), `audit_record` (the Audit summary for the
verdict) and `audit_switches` (the in-process audit on/off, for measuring its cost).
Each rule returns (name, reason); names are documented in docs/security.md.
Does not cover: collecting the facts (sandbox/audit.py, sandbox/worker.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.replies import AuditFacts, Integrity, TrialFacts
from tritonforge.evaluation.judge.timing import roofline_ms
from tritonforge.evaluation.sandbox.glue import EPILOGUE, base_name, classify_op, glue_digest
from tritonforge.hardware import DevicePeaks
from tritonforge.types import Audit, Problem, Status, Timing

# Rules reported by the worker that hybrid mode tolerates (KernelBench-style partial replacement).
HYBRID_TOLERATED = {"host_read"}
# An epilogue is at most this many PyTorch ops (e.g. sum then div).
EPILOGUE_MAX_OPS = 2
# Provenance rules that, on the repeated call of the caching check, mean a cached result.
_CACHE_SYMPTOMS = {"no_kernel_launch", "output_not_from_kernel", "decoy_launch"}

# The in-process audit of correctness trials (profiler + buffer snapshots + lineage). On by
# default; benchmarks/defense_cost.py switches it off to measure what it costs.
IN_PROCESS_AUDIT = True


def audit_switches(last_trial: bool = False) -> dict[str, bool]:
    """Fields of a worker `run` request that switch the in-process audit on or off; the last
    correctness trial also calls forward twice on the same tensors (the caching check)."""
    on = IN_PROCESS_AUDIT
    return {"profile": on, "snapshot": on, "repeat": on and last_trial}


def fmt_ops(ops: dict[str, int], n: int = 6) -> str:
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} x{v}" for k, v in top)


def reclassify(audit: AuditFacts) -> AuditFacts:
    """The audit with ops the worker called glue but the judge's own allowlist calls compute
    (the worker's copy of the list lives in the candidate's process) moved into `ops`."""
    ops, glue = dict(audit.ops), {}
    for name, n in audit.glue.items():
        if classify_op(name) == "glue":
            glue[name] = n
        else:
            ops[name] = ops.get(name, 0) + n
    return replace(audit, ops=ops, glue=glue)


def check_integrity(armed: str, got: Integrity) -> tuple[str, str] | None:
    """The audit's configuration as the worker reports it now must be what it was armed with
    at load, and its glue list the judge's own."""
    if not armed or got.armed != armed:
        return "judge_tamper", "the in-process audit's configuration changed after it was armed"
    if got.glue != glue_digest():
        return "judge_tamper", "the in-process audit's glue allowlist was changed"
    return None


def _signature_rule(facts: TrialFacts, history: list[str]) -> tuple[str, str] | None:
    """The caching check's two calls on the same tensors must launch the same kernels with the
    same grids, scalar arguments and argument roles; naming the cause by the earlier trials."""
    first, second = facts.first_signature, facts.signature
    if not facts.repeat or not first or first == second:
        return None
    lines = "; ".join(facts.signature_lines[:4])
    if history and first in history:
        return (
            "cached_result",
            "called a second time with the same input tensors, forward launched different "
            f"kernels or arguments than for fresh inputs ({lines or 'no launch'}): results "
            "must not be cached across calls",
        )
    return (
        "launch_mismatch",
        "an unprofiled call launched different kernels or arguments than the profiled calls: "
        "forward must do the same work whether or not it is observed",
    )


def decide_audit(
    audit: AuditFacts,
    facts: TrialFacts,
    s: EvalSettings,
    unsolicited: bool,
    history: list[str] | None = None,
) -> tuple[str, str] | None:
    """The rule that fires for one correctness trial, as (name, reason), or None. `history`:
    the launch signatures of the earlier trials after the first (None in the first trial, whose
    calls may do one-off work: the caching check's signatures are not compared there). The
    audit is the worker's word: a rule may reject on it, nothing here accepts."""
    strict = s.mode == "strict"
    if unsolicited:
        return "protocol_violation", "extra messages appeared on the evaluator's channel"
    audit = reclassify(audit)
    for v in audit.violations:
        rule = v.split(":", 1)[0]
        # host compute is invisible to the share measurement: tolerated only without a minimum
        if strict or rule not in HYBRID_TOLERATED or s.min_custom_share > 0:
            return rule, f"{v}"
    if facts.aliased:
        return (
            "output_aliases_input",
            f"output(s) {list(facts.aliased)} share memory with the inputs: return new tensors written by your kernels",
        )
    if facts.stale:
        return (
            "cached_result",
            f"called twice on the same input tensors, forward returned output(s) {list(facts.stale)} of the first call unchanged: results must not be cached across calls",
        )
    hit = _signature_rule(facts, history) if history is not None else None
    if hit:
        return hit
    if not strict:
        share = audit.custom_share
        if s.min_custom_share > 0 and (share is None or share < s.min_custom_share):
            return (
                "insufficient_custom_share",
                f"custom kernels did {0.0 if share is None else share:.0%} of the work; at least {s.min_custom_share:.0%} is required",
            )
        return None
    hit = _strict_rules(audit, facts, s)
    if hit and facts.repeat and hit[0] in _CACHE_SYMPTOMS:
        return (
            "cached_result",
            f"on a second call with the same input tensors: {hit[1]}; results must not be cached across calls",
        )
    return hit


def epilogue(audit: AuditFacts) -> dict[str, int]:
    """The PyTorch ops of one trial that form an epilogue, or {} when there is none or when other
    PyTorch compute ran too. An epilogue: at most EPILOGUE_MAX_OPS reductions or scales
    (glue.EPILOGUE) after the last Triton launch, each reading only kernel-written tensors
    (and scalars), and nothing else computed in PyTorch (the profiler's op list agrees)."""
    log, launches = audit.compute_log, audit.launches
    if not log or launches < 1 or len(log) > EPILOGUE_MAX_OPS:
        return {}
    names: dict[str, int] = {}
    for entry in log:
        name = base_name(entry.name)
        if not entry.reads_kernel or entry.launches_before != launches or name not in EPILOGUE:
            return {}
        names[f"aten::{name}"] = names.get(f"aten::{name}", 0) + 1
    profiled: dict[str, int] = {}
    for k, v in audit.ops.items():
        profiled[f"aten::{base_name(k)}"] = profiled.get(f"aten::{base_name(k)}", 0) + v
    return names if profiled == names else {}


def _strict_rules(audit: AuditFacts, facts: TrialFacts, s: EvalSettings) -> tuple[str, str] | None:
    tail = epilogue(audit)
    if tail:
        return (
            "torch_epilogue",
            f"forward ends with PyTorch {fmt_ops(tail)} on your kernel's output (a final "
            "reduction or scale after the kernels); strict mode requires every computation in "
            "your Triton kernels: fold it into the last kernel or add a small one. Hybrid mode "
            "accepts such an epilogue and reports it",
        )
    if audit.ops:
        return (
            "torch_compute",
            f"forward ran PyTorch compute ops ({fmt_ops(audit.ops)}); in strict mode every computation must happen in your Triton kernels (allocation, views, reshapes, dtype casts and parameter access are allowed)",
        )
    if s.backend == "triton":
        hit = _triton_launch_rules(audit, facts)
        if hit:
            return hit
    # (the CUDA C++ backend's kernels run inside the extension, where the launch recorder and
    # the lineage cannot see them: its outputs are judged by the profiler audit above, the
    # caching checks and correctness)
    if facts.expanded:
        return (
            "broadcast_output",
            f"output(s) {list(facts.expanded)} are broadcast views (stride 0), not materialised results",
        )
    return None


def _triton_launch_rules(audit: AuditFacts, facts: TrialFacts) -> tuple[str, str] | None:
    """Outputs must come from Triton launches that wrote something (recorder + lineage)."""
    if not audit.launches_ok:
        return "no_kernel_launch", "no Triton kernel was launched during forward"
    for i, p in enumerate(facts.provenance):
        if not p.numel or p.from_kernel is not False:
            continue  # empty output, or provenance not tracked
        if not p.launched_on:
            return (
                "output_not_from_kernel",
                f"output {i} was not written by any Triton kernel launched during forward (nor copied from a kernel's output)",
            )
        return (
            "output_not_from_kernel",
            f"output {i} was passed to a kernel, but no kernel changed it",
        )
    credited = any(p.from_kernel for p in facts.provenance)
    if audit.snapshotted and not audit.wrote_any and not credited:
        return "decoy_launch", "kernels were launched but none of them wrote to any buffer"
    return None


def stable_signature(history: list[str]) -> str | None:
    """The launch signature every profiled trial after the first had, or None when they differ
    (launches that depend on the data: then timed calls are not compared)."""
    return history[0] if history and all(h == history[0] for h in history) else None


class Timed(Protocol):
    """What the timing rules read of a timing (gpu_timing.TimingResult; a Verdict has it too)."""

    @property
    def speedup(self) -> float | None: ...

    @property
    def runtime(self) -> Timing | None: ...


def decide_timing(
    v: Timed,
    launches: list[int],
    records: list[AuditFacts],
    still_correct: bool,
    problem: Problem,
    nbytes: float,
    s: EvalSettings,
    peaks: DevicePeaks | None = None,
    signatures: list[str] | None = None,
    history: list[str] | None = None,
) -> tuple[str, str] | None:
    signatures, history = signatures or [], history or []
    expected = min((r.launches for r in records), default=0)
    if expected > 0 and launches and min(launches) == 0:
        return (
            "cached_result",
            "some timed calls launched no kernel although correctness runs did: results must not be cached across calls",
        )
    stable = stable_signature(history)
    odd = [i for i, sig in enumerate(signatures) if stable and sig != stable]
    if odd:
        return (
            "launch_mismatch",
            f"{len(odd)} of {len(signatures)} timed calls launched different kernels or arguments "
            "than the profiled calls: forward must do the same work whether or not it is observed",
        )
    if v.speedup is None or v.runtime is None:
        return None
    bound = roofline_ms(problem.flops, nbytes, peaks)
    if bound and v.runtime.median_ms < 0.5 * bound:  # physically impossible: every preset
        return (
            "implausible_speedup",
            f"measured {v.runtime.median_ms:.4f} ms is below the hardware bound of {bound:.4f} ms for this problem",
        )
    if v.speedup > s.max_plausible_speedup and s.implausible_speedup == "reject":
        return (  # a convention: rejected, or flagged (implausible_note)
            "implausible_speedup",
            f"speedup {v.speedup:.1f}x exceeds the plausible maximum {s.max_plausible_speedup:g}x",
        )
    return None


def implausible_note(v: Timed, s: EvalSettings) -> str | None:
    """The note of a speedup above the preset's plausible maximum where the preset flags it
    rather than rejecting it (`implausible_speedup = "flag"`); asked when decide_timing found
    no rule."""
    if v.speedup is None or v.runtime is None or v.speedup <= s.max_plausible_speedup:
        return None
    if s.implausible_speedup == "reject":
        return None
    return f"suspicious: speedup {v.speedup:.1f}x above {s.max_plausible_speedup:g}x"


def changed_after_timing(status: Status, why: str) -> tuple[str, str]:
    """Rule and message for a candidate that passed every correctness trial on fresh inputs but
    fails the re-check right after the timing loop: its outputs depend on state the loop built
    up (a cache keyed to the timed tensor, a call counter)."""
    return (
        "changed_after_timing",
        "correct in every correctness trial, but wrong on fresh inputs right after the timing "
        f"loop ({status.value}: {why}): outputs must depend only on the current inputs, never on "
        "state kept across calls (a race in a kernel can also show up here)",
    )


def audit_record(records: list[AuditFacts]) -> Audit:
    """Summary over all correctness trials for the verdict."""
    if not records:
        return Audit()
    ops: dict[str, int] = {}
    glue: dict[str, int] = {}
    tail: dict[str, int] = {}
    kernels: set[str] = set()
    shares = [r.custom_share for r in records if r.custom_share is not None]
    for r in records:
        for k, n in r.ops.items():
            ops[k] = ops.get(k, 0) + n
        for k, n in r.glue.items():
            glue[k] = glue.get(k, 0) + n
        for k, n in epilogue(r).items():
            tail[k] = tail.get(k, 0) + n
        kernels.update(r.kernels)
    last = records[-1]
    return Audit(
        kernel_launches=last.launches,
        kernels=sorted(kernels),
        torch_ops=ops,
        glue_ops=glue,
        custom_share=sum(shares) / len(shares) if shares else None,
        share_basis="work" if shares else None,
        epilogue_ops=tail,
        violations=list(last.violations),
    )
