"""Trusted decisions on what the worker reported: which reward-hack rule fires, if any.

Covers: `decide_audit` (after each correctness trial: blocked actions, PyTorch compute in strict
mode, no launch, outputs not produced by a kernel, decoy launches, aliasing, broadcast outputs,
minimum custom-kernel share in hybrid mode, unsolicited frames), `decide_timing` (timed calls
that skipped their kernels, implausible speedups), and `audit_record` (the Audit summary for the
verdict). Each rule returns (name, reason); names are documented in docs/security.md.
Does not cover: collecting the facts (audit.py, worker.py).
"""

from __future__ import annotations

from typing import Any

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.timing import roofline_ms
from tritonforge.types import Audit, Problem, Verdict

# Rules reported by the worker that hybrid mode tolerates (KernelBench-style partial replacement).
HYBRID_TOLERATED = {"host_read"}


def _fmt_ops(ops: dict[str, int], n: int = 6) -> str:
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} x{v}" for k, v in top)


def decide_audit(
    audit: dict[str, Any], facts: dict[str, Any], s: EvalSettings, unsolicited: bool
) -> tuple[str, str] | None:
    strict = s.mode == "strict"
    if unsolicited:
        return "protocol_violation", "extra messages appeared on the evaluator's channel"
    for v in audit.get("violations") or []:
        rule = v.split(":", 1)[0]
        if strict or rule not in HYBRID_TOLERATED:
            return rule, f"{v}"
    if facts.get("aliased"):
        return (
            "output_aliases_input",
            f"output(s) {facts['aliased']} share memory with the inputs: return new tensors written by your kernels",
        )
    if not strict:
        share = audit.get("custom_share")
        if s.min_custom_share > 0 and (share is None or share < s.min_custom_share):
            return (
                "insufficient_custom_share",
                f"custom kernels did {0.0 if share is None else share:.0%} of the work; at least {s.min_custom_share:.0%} is required",
            )
        return None
    ops = audit.get("ops") or {}
    if ops:
        return (
            "torch_compute",
            f"forward ran PyTorch compute ops ({_fmt_ops(ops)}); in strict mode every computation must happen in your Triton kernels (allocation, views, reshapes, dtype casts and parameter access are allowed)",
        )
    if s.backend == "triton" and not audit.get("launches_ok"):
        return "no_kernel_launch", "no Triton kernel was launched during forward"
    for i, p in enumerate(facts.get("provenance") or []):
        if not p.get("numel"):
            continue
        if not p.get("launched_on"):
            return (
                "output_not_from_kernel",
                f"output {i} was not passed to any Triton kernel launched during forward",
            )
        if p.get("checked_write") and not p.get("written"):
            return (
                "output_not_from_kernel",
                f"output {i} was passed to a kernel, but no kernel changed it",
            )
    if audit.get("snapshotted") and not audit.get("wrote_any"):
        return "decoy_launch", "kernels were launched but none of them wrote to any buffer"
    if facts.get("expanded"):
        return (
            "broadcast_output",
            f"output(s) {facts['expanded']} are broadcast views (stride 0), not materialised results",
        )
    return None


def decide_timing(
    v: Verdict,
    launches: list[int],
    records: list[dict[str, Any]],
    still_correct: bool,
    problem: Problem,
    nbytes: float,
    s: EvalSettings,
) -> tuple[str, str] | None:
    expected = min((r.get("launches", 0) for r in records), default=0)
    if expected > 0 and launches and min(launches) == 0:
        return (
            "cached_result",
            "some timed calls launched no kernel although correctness runs did: results must not be cached across calls",
        )
    if v.speedup is None or v.runtime is None:
        return None
    bound = roofline_ms(problem.flops, nbytes)
    if bound and v.runtime.median_ms < 0.5 * bound:
        if s.implausible_speedup == "reject":
            return (
                "implausible_speedup",
                f"measured {v.runtime.median_ms:.4f} ms is below the hardware bound of {bound:.4f} ms for this problem",
            )
        v.notes.append(f"suspicious: runtime below the roofline bound ({bound:.4f} ms)")
    if v.speedup > s.max_plausible_speedup:
        if s.implausible_speedup == "reject":
            return (
                "implausible_speedup",
                f"speedup {v.speedup:.1f}x exceeds the plausible maximum {s.max_plausible_speedup:g}x",
            )
        v.notes.append(f"suspicious: speedup {v.speedup:.1f}x above {s.max_plausible_speedup:g}x")
    return None


def audit_record(records: list[dict[str, Any]]) -> Audit:
    """Summary over all correctness trials for the verdict."""
    if not records:
        return Audit()
    ops: dict[str, int] = {}
    glue: dict[str, int] = {}
    kernels: set[str] = set()
    shares = [r["custom_share"] for r in records if r.get("custom_share") is not None]
    for r in records:
        for k, n in (r.get("ops") or {}).items():
            ops[k] = ops.get(k, 0) + n
        for k, n in (r.get("glue") or {}).items():
            glue[k] = glue.get(k, 0) + n
        kernels.update(r.get("kernels") or [])
    last = records[-1]
    return Audit(
        kernel_launches=int(last.get("launches", 0)),
        kernels=sorted(kernels),
        torch_ops=ops,
        glue_ops=glue,
        custom_share=sum(shares) / len(shares) if shares else None,
        share_basis=last.get("share_basis"),
        violations=list(last.get("violations") or []),
    )
