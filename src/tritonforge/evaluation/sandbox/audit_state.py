"""Shared state of the in-sandbox audit: one `AuditState` per worker process, and violations.

Covers: `Armed` (the frozen configuration set once when the audit is armed: candidate path,
scratch dir, who may spawn processes, strict mode), the records the audit layers (audit.py,
audit_hook.py, lineage.py, audit_launch.py) write while the candidate runs: kernel launches and
their per-call signatures, the ordered write log used for output provenance, violations (rule:
detail), and flags saying which phase is running. Does not cover: installing anything.

Nothing here is reachable by the candidate without an audited operation once the worker is
sealed (sealed.py: our modules leave `sys.modules`; `__globals__`, frames and gc are audited);
the audit hook keeps its own copy of `Armed`, so it has no switch to turn off.
See docs/security.md for what the in-process layer implies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_VIOLATIONS = 50


@dataclass(frozen=True)
class Armed:
    """What the audit was armed with (once per worker; the judge checks it is unchanged)."""

    candidate_path: str
    scratch: str
    allow_spawn_from: tuple[str, ...] = ("triton",)
    strict: bool = True  # strict mode: host reads during forward are blocked, not just recorded

    def fingerprint(self) -> str:
        return (
            f"{self.candidate_path}|{self.scratch}|{','.join(self.allow_spawn_from)}|{self.strict}"
        )


@dataclass
class Launch:
    name: str
    args: list[tuple[int, int]]  # (storage data_ptr, storage nbytes) of tensor arguments
    changed: list[int] | None = None  # storage ptrs whose bytes changed (None: not snapshotted)
    ok: bool = False


@dataclass
class AuditState:
    armed: Armed | None = None
    token: str = ""  # fresh per audited forward: names our profiler markers
    active: bool = False  # inside a forward call of a correctness or timing trial
    snapshot: bool = False  # diff argument buffers around launches
    light: bool = False  # timing: only count launches (and their signature)
    tuning: bool = False  # inside @triton.autotune benchmarking (light, but credits lineage)
    profiling: bool = False
    launch_count: int = 0
    snapshots: int = 0
    in_launch: int = 0
    in_grid: int = 0  # a candidate's callable grid is running (between a launch's snapshots)
    grid_written: set[int] = field(default_factory=set)  # storages its ops wrote there
    hook_busy: bool = False
    launches: list[Launch] = field(default_factory=list)
    # per call, one (kernel, grid, scalar args, data ptrs) per launch: the call's signature (light
    # calls keep (fn, args, kwargs) and are summarised after the call)
    raw: list[tuple[Any, ...]] = field(default_factory=list)
    input_ptrs: dict[int, int] = field(default_factory=dict)  # data ptr -> input index
    ranges: Any = None  # interpreter: (lo, hi) arrays of the storages the launch may touch
    bounded: bool = False  # the trusted replayer: accesses bounded although the audit is unarmed
    # storage ptr -> its content was last written by a kernel (or copied by glue from such)
    derived: dict[int, bool] = field(default_factory=dict)
    # storages allocated uninitialised in this call (torch.empty...) and not written since
    fresh: set[int] = field(default_factory=set)
    # compute ops run by the candidate during forward, in order: (name, every non-scalar tensor
    # it read holds kernel data, number of launches before it) -- the epilogue facts
    compute_log: list[tuple[str, bool, int]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    originals: dict[str, Any] = field(default_factory=dict)
    watched: list[tuple[Any, str, Any]] = field(default_factory=list)
    cells: list[tuple[Any, tuple[Any, ...], Any, Any]] = field(default_factory=list)
    classes: list[tuple[type, dict[str, Any]]] = field(default_factory=list)  # class dicts
    tripped: set[int] = field(default_factory=set)  # recording-only tripwires already hit


STATE = AuditState()


def violation(rule: str, detail: str) -> None:
    """Record `rule: detail` once (at most MAX_VIOLATIONS entries)."""
    msg = f"{rule}: {detail}"
    if msg not in STATE.violations and len(STATE.violations) < MAX_VIOLATIONS:
        STATE.violations.append(msg)
