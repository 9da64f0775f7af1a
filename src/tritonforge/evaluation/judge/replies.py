"""A worker's replies, parsed once, strictly, into frozen records.

Covers: one record per reply kind of the candidate's worker and of the trusted replayer
(`Failure`, `LoadReply`, `RunReply` with its `AuditFacts` and `TrialFacts`, `TimeReply`,
`ReplayReply`) and `parse(kind, raw)`. A candidate's worker is the attacker's process: every
field is checked for its exact type and a possible value (counts not negative, times finite,
strings and lists bounded, no unknown field, no missing one), and anything else is
`ReplyError`, which the judge turns into a `protocol_violation` reward hack, never an internal
error. After the parse no judge module reads a worker's dict; nothing in these records is
believed for an acceptance either (the in-process audit's facts may only reject, decide.py;
acceptance rests on the judge's comparisons and the trusted replay, replay.py).
Does not cover: the framing (sandbox/protocol.py), output descriptors (checked where they are
read: transport.py), recipes (sandbox/recipe_format.py), the trusted timing process's replies
(ref_timer.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tritonforge.evaluation.sandbox.protocol import TRIAL_PARTS
from tritonforge.types import Status

MAX_LIST = 100_000
MAX_TEXT = 64 * 1024


class ReplyError(ValueError):
    """A reply that does not parse, or states something impossible."""


# ---------------------------------------------------------------------------------------------
# Field checkers: each returns the value in its record form or raises ReplyError
# ---------------------------------------------------------------------------------------------


def _int(x: Any, lo: int = 0, hi: int = 2**62) -> int:
    if type(x) is not int or not lo <= x <= hi:
        raise ReplyError(f"expected an integer in [{lo}, {hi}], got {x!r:.60}")
    return x


def _num(x: Any, lo: float = 0.0, hi: float = 1e12) -> float:
    ok = (type(x) is int and lo <= x <= hi) or (
        type(x) is float and math.isfinite(x) and lo <= x <= hi
    )
    if not ok:
        raise ReplyError(f"expected a finite number in [{lo}, {hi}], got {str(x)[:60]}")
    return float(x)


def _bool(x: Any) -> bool:
    if type(x) is not bool:
        raise ReplyError(f"expected a boolean, got {x!r:.60}")
    return x


def _text(x: Any, most: int = MAX_TEXT) -> str:
    if type(x) is not str or len(x) > most:
        raise ReplyError(f"expected a string of at most {most} characters")
    return x


def _list(x: Any, item: Any, most: int = MAX_LIST) -> tuple[Any, ...]:
    if type(x) is not list or len(x) > most:
        raise ReplyError(f"expected a list of at most {most} items")
    return tuple(item(v) for v in x)


def _counts(x: Any) -> dict[str, int]:
    if type(x) is not dict or len(x) > 4096:
        raise ReplyError("expected an object of counts")
    return {_text(k, 300): _int(v) for k, v in x.items()}


def _floats(names: tuple[str, ...]) -> Any:
    """A checker of an object of numbers whose keys are among `names`."""

    def check(x: Any) -> dict[str, float]:
        if type(x) is not dict or not set(x) <= set(names):
            raise ReplyError(f"expected an object of numbers named {', '.join(names)}")
        return {k: _num(v) for k, v in x.items()}

    return check


def _dict(x: Any) -> dict[str, Any]:
    if type(x) is not dict:
        raise ReplyError("expected an object")
    return x


def _fields(raw: Any, required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict:
    """The object `raw` with every required key and no unknown one, each value checked."""
    optional = optional or {}
    if type(raw) is not dict:
        raise ReplyError(f"expected an object, got {type(raw).__name__}")
    missing = set(required) - set(raw)
    unknown = set(raw) - set(required) - set(optional)
    if missing or unknown:
        raise ReplyError(f"missing fields {sorted(missing)[:5]}, unknown {sorted(unknown)[:5]}")
    out = {}
    for key, value in raw.items():
        check = required.get(key) or optional[key]
        try:
            out[key] = check(value)
        except ReplyError as exc:
            raise ReplyError(f"{key}: {exc}") from None
    return out


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Integrity:
    armed: str = ""
    glue: str = ""


def _integrity(x: Any) -> Integrity:
    return Integrity(**_fields(x, {"armed": _text, "glue": _text}))


@dataclass(frozen=True)
class Brief:
    """The audit part of a failure, load or time reply."""

    violations: tuple[str, ...] = ()
    launches_ok: int = 0
    integrity: Integrity = field(default_factory=Integrity)


def _brief(x: Any) -> Brief:
    f = _fields(x, {"violations": lambda v: _list(v, _text), "launches_ok": _int,
                    "integrity": _integrity})  # fmt: skip
    return Brief(**f)


@dataclass(frozen=True)
class Failure:
    """A request the worker could not complete (`ok` false)."""

    status: str
    phase: str
    message: str
    audit: Brief = field(default_factory=Brief)
    memory: dict[str, int] | None = None  # device memory figures of an out-of-memory error
    replay: bool = False  # the replayer's

    def status_enum(self) -> Status:
        try:
            return Status(self.status)
        except ValueError:
            return Status.REWARD_HACK


def _failure(raw: dict[str, Any]) -> Failure:
    f = _fields(
        raw,
        {"ok": _bool, "status": lambda v: _text(v, 64), "message": _text},
        {"phase": lambda v: _text(v, 64), "audit": _brief, "memory": _counts,
         "replay": _bool},
    )  # fmt: skip
    f.pop("ok")
    return Failure(phase=f.pop("phase", ""), **f)


@dataclass(frozen=True)
class SandboxFacts:
    namespaces: bool
    user: str
    warnings: tuple[str, ...]
    threads: int


@dataclass(frozen=True)
class LoadReply:
    sandbox: SandboxFacts
    audit: Brief
    cuda_init_s: float
    notes: tuple[str, ...]
    shared: dict[str, str] | None = None  # the shared buffers' handshake: token or error


def _shared(x: Any) -> dict[str, str]:
    f = _fields(x, {}, {"token": lambda v: _text(v, 256), "error": _text})
    if len(f) != 1:
        raise ReplyError("a shared-buffer answer has a token or an error")
    return f


def _load(raw: dict[str, Any]) -> LoadReply:
    sandbox = {"namespaces": _bool, "user": lambda v: _text(v, 1000),
               "warnings": lambda v: _list(v, _text, 64), "threads": _int}  # fmt: skip
    f = _fields(
        raw,
        {"ok": _bool, "sandbox": lambda v: SandboxFacts(**_fields(v, sandbox)),
         "audit": _brief, "cuda_init_s": _num, "notes": lambda v: _list(v, _text, 64)},
        {"shared": _shared},
    )  # fmt: skip
    f.pop("ok")
    return LoadReply(**f)


@dataclass(frozen=True)
class Provenance:
    numel: int
    launched_on: bool
    from_kernel: bool | None


def _provenance(x: Any) -> Provenance:
    opt_bool = lambda v: None if v is None else _bool(v)  # noqa: E731
    return Provenance(**_fields(x, {"numel": _int, "launched_on": _bool, "from_kernel": opt_bool}))


@dataclass(frozen=True)
class TrialFacts:
    """What the worker says about one audited call (untrusted: decide.py may only reject)."""

    mutated: tuple[int, ...] = ()
    aliased: tuple[int, ...] = ()
    provenance: tuple[Provenance, ...] = ()
    expanded: tuple[int, ...] = ()
    repeat: bool = False
    stale: tuple[int, ...] = ()
    signature: str = ""
    signature_lines: tuple[str, ...] = ()
    first_signature: str | None = None
    first_launches: int | None = None


def _facts(x: Any) -> TrialFacts:
    ints = lambda v: _list(v, _int, 10_000)  # noqa: E731
    f = _fields(
        x,
        {"mutated": ints, "aliased": ints, "provenance": lambda v: _list(v, _provenance, 10_000),
         "expanded": ints, "repeat": _bool, "stale": ints, "signature": lambda v: _text(v, 64),
         "signature_lines": lambda v: _list(v, lambda s: _text(s, 4096), 64)},
        {"first_signature": lambda v: _text(v, 64), "first_launches": _int},
    )  # fmt: skip
    return TrialFacts(**f)


@dataclass(frozen=True)
class OpShape:
    name: str
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    count: int


def _op_shape(x: Any) -> OpShape:
    if type(x) is not list or len(x) != 4:
        raise ReplyError("an op shape entry is [name, shapes, dtypes, count]")
    shape = lambda s: _list(s, lambda d: _int(d, 0, 2**50), 16)  # noqa: E731
    return OpShape(_text(x[0], 300), _list(x[1], shape, 64), _list(x[2], lambda d: _text(d, 64),
                   64), _int(x[3]))  # fmt: skip


@dataclass(frozen=True)
class ComputeEntry:
    name: str
    reads_kernel: bool
    launches_before: int


def _compute(x: Any) -> ComputeEntry:
    if type(x) is not list or len(x) != 3:
        raise ReplyError("a compute log entry is [name, reads kernel data, launches before]")
    return ComputeEntry(_text(x[0], 300), _bool(x[1]), _int(x[2]))


@dataclass(frozen=True)
class AuditFacts:
    """The in-process audit of one correctness call (untrusted: it may only reject).
    `custom_share` is the judge's own figure, set after the parse (never read from the reply)."""

    launches: int = 0
    launches_ok: int = 0
    kernels: tuple[str, ...] = ()
    wrote_any: bool = False
    snapshotted: int = 0
    ops: dict[str, int] = field(default_factory=dict)
    glue: dict[str, int] = field(default_factory=dict)
    op_shapes: tuple[OpShape, ...] = ()
    compute_log: tuple[ComputeEntry, ...] = ()
    violations: tuple[str, ...] = ()
    integrity: Integrity = field(default_factory=Integrity)
    custom_share: float | None = None


def _audit(x: Any) -> AuditFacts:
    f = _fields(
        x,
        {"launches": _int, "launches_ok": _int, "kernels": lambda v: _list(v, _text, 4096),
         "wrote_any": _bool, "snapshotted": _int, "ops": _counts, "glue": _counts,
         "op_shapes": lambda v: _list(v, _op_shape, 4096),
         "compute_log": lambda v: _list(v, _compute, 4096),
         "violations": lambda v: _list(v, _text, 4096), "integrity": _integrity},
    )  # fmt: skip
    if f["launches_ok"] > f["launches"] or f["snapshotted"] > f["launches"]:
        raise ReplyError("more successful or snapshotted launches than launches")
    return AuditFacts(**f)


@dataclass(frozen=True)
class RunReply:
    outputs: dict[str, Any]  # the output descriptor (checked when read: transport.py)
    facts: TrialFacts
    audit: AuditFacts
    seconds: float
    recipe: dict[str, Any] | None = None  # checked by replay.take_recipe / recipe_format


def _run(raw: dict[str, Any]) -> RunReply:
    f = _fields(
        raw,
        {"ok": _bool, "outputs": _dict, "facts": _facts, "audit": _audit, "seconds": _num},
        {"recipe": _dict},
    )  # fmt: skip
    f.pop("ok")
    return RunReply(**f)


@dataclass(frozen=True)
class Kept:
    trial: int
    outputs: dict[str, Any]


@dataclass(frozen=True)
class TimeReply:
    times_ms: tuple[float, ...]
    host_ms: tuple[float, ...]
    clock: str
    lead_ms: float
    first_lead_ms: float
    exposed: int
    leads_ms: dict[str, float]
    synced: bool
    launches: tuple[int, ...]
    signatures: tuple[str, ...]
    loop_ms: float
    parts_ms: dict[str, float]
    audit: Brief
    kept: tuple[Kept, ...] = ()
    diverged: int = 0


def _time(raw: dict[str, Any]) -> TimeReply:
    times = lambda v: _list(v, lambda t: _num(t, 0.0, 1e9), 100_000)  # noqa: E731
    kept = lambda v: Kept(**_fields(v, {"trial": _int, "outputs": _dict}))  # noqa: E731
    f = _fields(
        raw,
        {"ok": _bool, "times_ms": times, "host_ms": times, "clock": lambda v: _text(v, 64),
         "lead_ms": _num, "first_lead_ms": _num, "exposed": _int,
         "leads_ms": _floats(("asked", "device", "enqueue")),
         "synced": _bool, "launches": lambda v: _list(v, _int), "loop_ms": _num,
         "signatures": lambda v: _list(v, lambda s: _text(s, 64)),
         "parts_ms": _floats(TRIAL_PARTS),
         "audit": _brief},
        {"kept": lambda v: _list(v, kept, 16), "diverged": _int},
    )  # fmt: skip
    f.pop("ok")
    if len(f["times_ms"]) != len(f["host_ms"]):
        raise ReplyError("as many host times as trial times")
    return TimeReply(**f)


@dataclass(frozen=True)
class ReplayReply:
    """The trusted replayer's answer to `replay_run` (parsed as strictly all the same)."""

    outputs: dict[str, Any]


def _replay(raw: dict[str, Any]) -> ReplayReply:
    return ReplayReply(_fields(raw, {"ok": _bool, "outputs": _dict})["outputs"])


@dataclass(frozen=True)
class TraceReply:
    """The replayer's answer to `replay_trace`: per output, every element kernel data."""

    from_kernel: tuple[bool, ...]


def _trace(raw: dict[str, Any]) -> TraceReply:
    f = _fields(raw, {"ok": _bool, "from_kernel": lambda v: _list(v, _bool, 10_000)})
    return TraceReply(f["from_kernel"])


@dataclass(frozen=True)
class ReplayLoaded:
    shared: dict[str, str] | None = None


def _replay_loaded(raw: dict[str, Any]) -> ReplayLoaded:
    f = _fields(raw, {"ok": _bool}, {"shared": _shared})
    return ReplayLoaded(f.get("shared"))


_KINDS = {
    "load": _load,
    "run": _run,
    "time": _time,
    "replay_load": _replay_loaded,
    "replay_run": _replay,
    "replay_trace": _trace,
}


def parse(kind: str, raw: Any) -> Any:
    """The reply to a request of `kind` as its record, or a `Failure`; ReplyError otherwise."""
    if type(raw) is not dict or type(raw.get("ok")) is not bool:
        raise ReplyError("a reply is an object with a boolean `ok`")
    if not raw["ok"]:
        return _failure(raw)
    return _KINDS[kind](raw)
