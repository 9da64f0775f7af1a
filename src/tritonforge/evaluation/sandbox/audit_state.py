"""Shared state of the in-sandbox audit: one `AuditState` per worker process, and violations.

Covers: the records the audit layers (audit.py, audit_hook.py, lineage.py) write while the
candidate runs: kernel launches, the ordered write log used for output provenance, violations
(rule: detail), and flags saying which phase is running. Does not cover: installing anything.
Lives in the candidate's process: see docs/security.md for what that implies.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

MAX_VIOLATIONS = 50


@dataclass
class Launch:
    name: str
    args: list[tuple[int, int]]  # (storage data_ptr, storage nbytes) of tensor arguments
    changed: list[int] | None = None  # storage ptrs whose bytes changed (None: not snapshotted)
    ok: bool = False


@dataclass
class AuditState:
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    candidate_path: str = ""
    scratch: str = ""
    allow_spawn_from: tuple[str, ...] = ("triton",)
    strict: bool = True  # strict mode: host reads during forward are blocked, not just recorded
    active: bool = False  # inside a forward call of a correctness or timing trial
    snapshot: bool = False  # diff argument buffers around launches
    light: bool = False  # timing: only count launches
    tuning: bool = False  # inside @triton.autotune benchmarking (light, but credits lineage)
    profiling: bool = False
    launch_count: int = 0
    snapshots: int = 0
    in_launch: int = 0
    hook_busy: bool = False
    launches: list[Launch] = field(default_factory=list)
    # storage ptr -> its content was last written by a kernel (or copied by glue from such)
    derived: dict[int, bool] = field(default_factory=dict)
    # compute ops run by the candidate during forward, in order: (name, every non-scalar tensor
    # it read holds kernel data, number of launches before it) -- the epilogue facts
    compute_log: list[tuple[str, bool, int]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    originals: dict[str, Any] = field(default_factory=dict)
    watched: list[tuple[Any, str, Any]] = field(default_factory=list)


STATE = AuditState()


def violation(rule: str, detail: str) -> None:
    """Record `rule: detail` once (at most MAX_VIOLATIONS entries)."""
    msg = f"{rule}: {detail}"
    if msg not in STATE.violations and len(STATE.violations) < MAX_VIOLATIONS:
        STATE.violations.append(msg)
