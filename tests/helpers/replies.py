"""Worker-reply records (judge/replies.py) from partial, wire-like dicts, for unit tests of the
judge's decisions: unset fields take the record's defaults, nested dicts and lists become their
records and tuples."""

from __future__ import annotations

from typing import Any

from tritonforge.evaluation.judge.replies import (
    AuditFacts,
    ComputeEntry,
    Integrity,
    OpShape,
    Provenance,
    TrialFacts,
)


def audit_facts(d: dict[str, Any] | None = None) -> AuditFacts:
    d = dict(d or {})
    if "integrity" in d:
        d["integrity"] = Integrity(**d["integrity"])
    if "compute_log" in d:
        d["compute_log"] = tuple(ComputeEntry(*e) for e in d["compute_log"])
    if "op_shapes" in d:
        d["op_shapes"] = tuple(
            OpShape(n, tuple(tuple(s) for s in sh), tuple(dt), c) for n, sh, dt, c in d["op_shapes"]
        )
    for k in ("kernels", "violations"):
        if k in d:
            d[k] = tuple(d[k])
    return AuditFacts(**d)


def trial_facts(d: dict[str, Any] | None = None) -> TrialFacts:
    d = dict(d or {})
    if "provenance" in d:
        d["provenance"] = tuple(Provenance(**p) for p in d["provenance"])
    for k in ("mutated", "aliased", "expanded", "stale", "signature_lines"):
        if k in d:
            d[k] = tuple(d[k])
    return TrialFacts(**d)
