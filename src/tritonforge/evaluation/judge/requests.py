"""The judge's requests to its processes, one frozen record per request op.

Covers: what the judge asks a candidate's worker (`Load`, `Run`, `Time`), the trusted replayer
(`ReplayLoad`, `ReplayRun`, `ReplayTrace`) and the device's trusted timing process (`RefLoad`,
`RefTime`, `RefDrop`), and the two parts the transport adds (`Carry`: how a case's inputs travel;
`SharedOffer`: the shared device buffers offered at load). Each record's `wire()` is the dict
sent; only the transport calls (`CandidateRun.call`, `RefTimer._request`) make it, so no judge
module hands another a request dict. The fields are the judge's own values: nothing here comes
from a worker, except a recipe's constants' descriptor (`ReplayLoad.blob`), which the replayer
unpacks defensively like any descriptor (sandbox/protocol.py).
Two dicts stay, named: `Wire` (what `wire()` returns, for the framing) and `Descriptor` (a
packed value's descriptor, protocol.pack's JSON: `inputs`, `init_inputs`, `blob`), which are
the wire format itself, made by `pack` and read by `unpack`.
Does not cover: the replies (replies.py), the framing (sandbox/protocol.py), the worker side
(sandbox/worker.py, sandbox/reference_host.py, sandbox/timing_loop.py, which read these dicts
and check them as before), the fork server's spawn requests (forkserver.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from tritonforge.evaluation.sandbox.recipe_format import Recipe, encode_recipe

# A request's wire form: the JSON object the framing sends (sandbox/protocol.send_msg); made by
# `wire()` only and read by the transport calls only.
Wire = dict[str, Any]
# A packed value's descriptor (protocol.pack's JSON): the wire format itself, read by `unpack`.
Descriptor = dict[str, Any]


@dataclass(frozen=True)
class Carry:
    """How one case's inputs reach a worker (transport.Transport.send): their descriptor, in a
    memfd sent with the request or (`shared`) already in the shared input buffer; `shared_out`:
    the worker may write its outputs into the shared output buffer."""

    inputs: Descriptor
    shared: bool = False
    shared_out: bool = False

    def wire(self) -> Wire:
        out: Wire = {"inputs": self.inputs}
        if self.shared:
            out["shared"] = True
        if self.shared_out:
            out["shared_out"] = True
        return out


@dataclass(frozen=True)
class SharedOffer:
    """The two shared device buffers offered with a load (transport.Transport.offer)."""

    in_bytes: int
    in_size: int
    out_bytes: int
    out_size: int

    def wire(self) -> Wire:
        return {"shared": {"in": self.in_bytes, "in_size": self.in_size,
                           "out": self.out_bytes, "out_size": self.out_size}}  # fmt: skip


def _offered(shared: SharedOffer | None) -> Wire:
    return shared.wire() if shared is not None else {}


@dataclass(frozen=True)
class Load:
    """Import the candidate and build ModelNew (its init inputs in the first fd)."""

    op: ClassVar[str] = "load"
    source: str
    init_inputs: Descriptor
    init_seed: int
    device: str
    backend: str
    mode: str
    preimport: tuple[str, ...] = ()
    shared: SharedOffer | None = None

    def wire(self) -> Wire:
        return {"op": self.op, "source": self.source, "init_inputs": self.init_inputs,
                "init_seed": self.init_seed, "device": self.device, "backend": self.backend,
                "mode": self.mode, "preimport": list(self.preimport),
                **_offered(self.shared)}  # fmt: skip


@dataclass(frozen=True)
class Run:
    """One audited correctness call (decide.audit_switches: `profile`, `snapshot`, `repeat`);
    `recipe`: also record the call's device work for the trusted replay."""

    op: ClassVar[str] = "run"
    carry: Carry
    profile: bool
    snapshot: bool
    repeat: bool
    recipe: bool = False

    def wire(self) -> Wire:
        out = {"op": self.op, **self.carry.wire(), "profile": self.profile,
               "snapshot": self.snapshot, "repeat": self.repeat}  # fmt: skip
        if self.recipe:
            out["recipe"] = True
        return out


@dataclass(frozen=True)
class Time:
    """Timed calls of the candidate (or its replayer); `tolerances` (dtype, tolerance): a
    replayer checks every timed call's outputs against the first one's (timing_loop.Consistency)."""

    op: ClassVar[str] = "time"
    carry: Carry
    warmup: int
    trials: int
    budget_ms: float
    clock: str
    tolerances: tuple[tuple[str, float], ...] | None = None

    def wire(self) -> Wire:
        out = {"op": self.op, **self.carry.wire(), "warmup": self.warmup, "trials": self.trials,
               "budget_ms": self.budget_ms, "clock": self.clock}  # fmt: skip
        if self.tolerances is not None:
            out["consistency"] = {"tol": dict(self.tolerances)}
        return out


@dataclass(frozen=True)
class ReplayLoad:
    """Start a replayer: the kernel module, the parsed recipe and its constants (the blob's
    descriptor as the worker sent it; its bytes in the first fd)."""

    op: ClassVar[str] = "replay_load"
    device: str
    module: str
    recipe: Recipe
    blob: Descriptor
    shared: SharedOffer | None = None

    def wire(self) -> Wire:
        return {"op": self.op, "device": self.device, "module": self.module,
                "recipe": encode_recipe(self.recipe), "blob": self.blob,
                **_offered(self.shared)}  # fmt: skip


@dataclass(frozen=True)
class ReplayRun:
    """One replayed call on the judge's inputs."""

    op: ClassVar[str] = "replay_run"
    carry: Carry

    def wire(self) -> Wire:
        return {"op": self.op, **self.carry.wire()}


@dataclass(frozen=True)
class ReplayTrace:
    """One replayed call traced with the `poison` byte (replay_provenance.py)."""

    op: ClassVar[str] = "replay_trace"
    carry: Carry
    poison: int

    def wire(self) -> Wire:
        return {"op": self.op, **self.carry.wire(), "poison": self.poison}


@dataclass(frozen=True)
class RefLoad:
    """Load a reference in the timing process (`compile`: its torch.compile too) with one
    case's inputs as its timing inputs; weights and inputs travel as the transport adds them
    (transport.Parcel)."""

    op: ClassVar[str] = "ref_load"
    key: str
    source: str
    init_inputs: Descriptor
    init_seed: int
    device: str
    compile: bool
    inputs: Descriptor
    case: str

    def wire(self) -> Wire:
        return {"op": self.op, "key": self.key, "source": self.source,
                "init_inputs": self.init_inputs, "init_seed": self.init_seed,
                "device": self.device, "compile": self.compile, "inputs": self.inputs,
                "case": self.case}  # fmt: skip


@dataclass(frozen=True)
class RefTime:
    """Timed calls of a loaded reference (eager, or `compiled`) on case `case`'s inputs."""

    op: ClassVar[str] = "time"
    key: str
    compiled: bool
    inputs: Descriptor
    case: str
    warmup: int
    trials: int
    budget_ms: float
    clock: str

    def wire(self) -> Wire:
        return {"op": self.op, "key": self.key, "compiled": self.compiled,
                "inputs": self.inputs, "case": self.case, "warmup": self.warmup,
                "trials": self.trials, "budget_ms": self.budget_ms, "clock": self.clock}  # fmt: skip


@dataclass(frozen=True)
class RefDrop:
    """Forget a loaded reference (`inputs_only`: only its timing inputs)."""

    op: ClassVar[str] = "ref_drop"
    key: str
    inputs_only: bool = False

    def wire(self) -> Wire:
        out: Wire = {"op": self.op, "key": self.key}
        if self.inputs_only:
            out["inputs_only"] = True
        return out


WorkerRequest = Load | Run | Time | ReplayLoad | ReplayRun | ReplayTrace
TimerRequest = RefLoad | RefTime | RefDrop
