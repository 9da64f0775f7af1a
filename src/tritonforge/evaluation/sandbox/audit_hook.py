"""The PEP 578 audit hook: what candidate code may not do, and the private side of every stub.

Covers: `Hook`, added once in the fork server (it cannot be removed) and armed once in the worker
with a frozen `Armed` it keeps to itself (no switch turns it off). It
- attributes each interpreter event to its origin (the candidate's own code, a stdlib or library
  function it called, or library internals) and blocks what that origin may not do (network,
  process spawning, signals, ctypes, frames and heap introspection, dynamic code, files (see
  audit_fs.py), threads, rewriting functions' `__code__`/`__defaults__`, forbidden imports) by
  raising PermissionError after recording a violation, so catching the exception hides nothing;
- serves the stubs (stubs.py): it accepts `tritonforge.*` events only from the stubs' own code
  objects, decides tripwires (record, block) and hands back their originals, resolves `os.open`
  names, guards the candidate's imports, and passes launch, autotune and dispatch events to the
  handlers registered by the recorder (audit_launch.py, lineage.py).
Nothing reachable refers to the hook: the interpreter keeps it, and the worker drops its own
reference once armed. Rules: network, process_spawn, signal_process, native_code, introspection,
dynamic_code, filesystem, forbidden_import (import_guard.py), sub_interpreter, background_thread
(docs/security.md).
Does not cover: the forward scope and tamper checks (audit.py), isolation (isolation.py).
"""

from __future__ import annotations

import builtins
import os
import sys
import sysconfig
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tritonforge.evaluation.sandbox import audit_fs, import_guard
from tritonforge.evaluation.sandbox.audit_state import STATE, Armed, violation

_STDLIB = tuple(
    {
        q
        for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"])
        for q in (p, os.path.realpath(p))
    }
)
# stdlib modules whose internal use of frames / exec only reads module names or builds classes
# (namedtuple, dataclasses, enum, typing, warnings): allowed even when the candidate calls them.
# Nothing else: a helper that reads attributes by name (string.Formatter.get_field) would read a
# frame for the candidate.
_SAFE_STDLIB = frozenset({"collections", "dataclasses", "enum", "typing", "warnings"})


@dataclass
class Origin:
    on_stack: bool  # a candidate frame is somewhere on the stack
    immediate: str  # kind of the frame that raised the event
    caller: str  # kind of that frame's caller
    nearest: str  # nearest kind that is not stdlib
    module: str  # top-level stdlib module of the immediate frame ('' if not stdlib)
    entry: str = ""  # file of the first frame outside the stdlib that the candidate called


_NONE = Origin(False, "none", "none", "none", "")


def _stdlib_module(filename: str) -> str | None:
    if filename.startswith("<frozen"):
        return filename[len("<frozen ") : -1].split(".")[0]
    if "site-packages" in filename or "dist-packages" in filename:
        return None
    for root in _STDLIB:
        if filename.startswith(root + os.sep):
            rel = filename[len(root) + 1 :]
            return rel.split(os.sep)[0].removesuffix(".py")
    return None


_STUBS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stubs.py")


def _kind_of(filename: str, candidate_path: str) -> str:
    if filename == candidate_path:
        return "candidate"
    if filename == _STUBS_FILE or _stdlib_module(filename) is not None:
        return "stdlib"  # a stub stands in for a library function: see through it
    if filename.startswith("<"):
        return "candidate"  # code compiled from a string: generated on someone's behalf
    return "triton" if f"{os.sep}triton{os.sep}" in filename else "library"


# ---------------------------------------------------------------------------------------------
# Events -> rules
# ---------------------------------------------------------------------------------------------

_NETWORK = frozenset(
    {
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "socket.sendto",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.sendmsg",
    }
)
_SPAWN = frozenset(
    {
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "pty.spawn",
        "os.startfile",
    }
)
_SIGNAL = frozenset({"os.kill", "os.killpg", "signal.pthread_kill"})
_THREADS = frozenset({"_thread.start_new_thread", "_thread.start_joinable_thread"})
_FRAMES = frozenset({"sys._getframe", "sys._getframemodulename", "sys._current_frames"})
# making code and functions from bytes: the import system does it, the candidate may not
_MAKE_CODE = frozenset({"code.__new__", "function.__new__", "marshal.loads"})
_INTROSPECT = frozenset(
    {
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "sys.settrace",
        "sys.setprofile",
        "sys.addaudithook",
        "cpython._PySys_ClearAuditHooks",
    }
)
_RESTRICTED_ATTRS = frozenset(
    {
        "f_back",
        "f_globals",
        "f_locals",
        "f_code",
        "f_builtins",
        "tb_frame",
        "gi_frame",
        "cr_frame",
        "ag_frame",
        "gi_code",
        "cr_code",
        "ag_code",
        "__code__",
        "__globals__",
    }
)
# writing these rewrites what an existing function runs (e.g. one of the stubs)
_FUNCTION_ATTRS = frozenset({"__code__", "__defaults__", "__kwdefaults__"})


def rule_for(event: str, args: tuple) -> str | None:
    if event in _NETWORK:
        return "network"
    if event in _SPAWN:
        return "process_spawn"
    if event in _SIGNAL:
        return "signal_process"
    if event in _THREADS:
        return "background_thread"
    if event.startswith("ctypes."):
        return "native_code"
    if event in _FRAMES or event in _INTROSPECT or event in _MAKE_CODE:
        return "introspection"
    if event == "object.__getattr__" and len(args) > 1 and args[1] in _RESTRICTED_ATTRS:
        return "introspection"
    if event == "object.__setattr__" and len(args) > 1 and args[1] in _FUNCTION_ATTRS:
        return "introspection"
    if event in ("exec", "compile"):
        return "dynamic_code"
    if event in audit_fs.FS_ARGS:
        return "filesystem"
    if event == "import":  # with a file: an extension module (native code) being loaded
        return import_guard.import_event_rule(args)
    if event == "cpython.PyInterpreterState_New":
        return "sub_interpreter"
    return None


def _direct(o: Origin) -> bool:
    """The candidate did it, or called a stdlib/library function that did it on its behalf
    (a stdlib helper known to only read module names is not counted)."""
    if o.immediate == "candidate":
        return True
    return o.caller == "candidate" and not (o.immediate == "stdlib" and o.module in _SAFE_STDLIB)


def _short_args(args: tuple) -> str:
    try:
        return repr(args)[:120]
    except Exception:
        return "<args>"


@dataclass(frozen=True)
class Trip:
    """One tripwire: the function it stands in for and what calling it means."""

    original: Any
    rule: str  # "": never trips (the stub only routes the call, e.g. to mark a buffer fresh)
    what: str
    always: bool  # blocked at any time with the candidate on the stack (else: during forward)
    in_launch: bool = False  # also inside a launch window (where tripwires are otherwise off)


Handler = Callable[["Hook", tuple, Any], None]


class Hook:
    """The audit hook (see the module docstring). One per process."""

    def __init__(self, stub_codes: tuple[Any, ...]):
        self.armed: Armed | None = None
        self.busy = False
        self.stub_codes = frozenset(stub_codes)
        self.trips: list[Trip] = []
        self.handlers: dict[str, Handler] = {}
        self.kinds: dict[str, str] = {}
        self.proc_devs: frozenset[int] = frozenset()
        self.real_import = builtins.__import__
        self.real_open = os.open

    def arm(self, armed: Armed) -> None:
        if self.armed is not None:
            raise RuntimeError("the audit hook is armed once per process")
        self.proc_devs = audit_fs.proc_devices()
        self.armed = armed

    def add_trip(self, trip: Trip) -> int:
        self.trips.append(trip)
        return len(self.trips) - 1

    # -- origins ---------------------------------------------------------------------------
    def kind(self, frame: Any) -> str:
        if frame is None:
            return "none"
        name = frame.f_code.co_filename
        kind = self.kinds.get(name)
        if kind is None:
            kind = _kind_of(name, self.armed.candidate_path if self.armed else "\0")
            if self.armed is not None:
                self.kinds[name] = kind
        return kind

    def module_of(self, frame: Any) -> str:
        """The top-level stdlib module a frame runs in ('' if none)."""
        return _stdlib_module(frame.f_code.co_filename) or "" if frame is not None else ""

    def origin(self, frame: Any) -> Origin:
        """Where the event raised in `frame` comes from (see Origin)."""
        if self.armed is None or frame is None:
            return _NONE
        name = frame.f_code.co_filename
        immediate = self.kind(frame)
        module = (_stdlib_module(name) or "") if immediate == "stdlib" else ""
        caller = self.kind(frame.f_back)
        nearest, entry, f = "none", "", frame
        while f is not None:
            k = self.kind(f)
            if nearest == "none" and k != "stdlib":
                nearest = k
            if k == "candidate":
                return Origin(True, immediate, caller, nearest, module, entry)
            if k != "stdlib":
                entry = f.f_code.co_filename
            f = f.f_back
        return Origin(False, immediate, caller, nearest, module)

    def allowed(self, rule: str, event: str, args: tuple, o: Origin) -> bool:
        """Whether an event raised while candidate code is on the stack is still fine."""
        if rule == "introspection":
            if event in _FRAMES or event in _MAKE_CODE or event.startswith("object."):
                return not _direct(o)  # library internals use frames; handing them out is the risk
            return o.nearest != "candidate"
        if rule == "dynamic_code":
            return not _direct(o)  # namedtuple/dataclasses exec internally; timeit/runpy do not
        if rule == "filesystem":
            if o.nearest != "candidate":
                return True
            return audit_fs.bad_path(event, args, self.armed.scratch, self.proc_devs) is None
        if rule == "forbidden_import":
            return import_guard.new_import_allowed(self, args, o)
        builder = import_guard.builder_entry(o.entry, self.armed.backend)  # called directly
        if rule == "process_spawn":  # Triton running ptxas / a compiler for a launch
            return o.nearest in self.armed.allow_spawn_from and not builder
        if rule == "native_code":  # torch/triton loading their own libraries
            return o.nearest in ("triton", "library") and not builder
        return False  # network, signals, threads: never on behalf of the candidate

    # -- the hook ----------------------------------------------------------------------------
    def __call__(self, event: str, args: tuple) -> None:
        if self.busy:
            return
        if event.startswith("tritonforge."):
            self._stub_event(event, args)
            return
        if self.armed is None:
            return
        rule = rule_for(event, args)
        if rule is None:
            return
        self.busy = True
        try:
            o = self.origin(sys._getframe(1))
            if not o.on_stack or self.allowed(rule, event, args, o):
                return
            violation(rule, f"{event} {_short_args(args)}")
        finally:
            self.busy = False
        raise PermissionError(f"blocked by the evaluation sandbox: {event} ({rule})")

    def _stub_event(self, event: str, args: tuple) -> None:
        self.busy = True
        try:
            frame = sys._getframe(2)  # the stub (1 is this method's caller, __call__)
            forged = frame.f_code not in self.stub_codes
        finally:
            self.busy = False
        if forged:
            violation("judge_tamper", f"forged audit event {event}")
            raise PermissionError(f"blocked by the evaluation sandbox: forged {event}")
        handler = self.handlers.get(event) or _BUILTIN.get(event)
        if handler is not None:  # not busy: any code a handler runs is audited as usual
            handler(self, args, frame)

    @contextmanager
    def quiet(self):
        """Our own frame reads (their audit events are ours, not the candidate's)."""
        busy, self.busy = self.busy, True
        try:
            yield
        finally:
            self.busy = busy


# ---------------------------------------------------------------------------------------------
# Stub events handled here: tripwires, os.open, the candidate's imports
# ---------------------------------------------------------------------------------------------


def _trip(hook: Hook, args: tuple, frame: Any) -> None:
    key, box = args
    trip = hook.trips[key]
    live = trip.in_launch or not STATE.in_launch
    if trip.rule and hook.armed is not None and live:  # "": never trips
        with hook.quiet():
            caller = frame.f_back
            on_stack = trip.always and hook.origin(caller).on_stack
            direct = not trip.always and hook.kind(caller) == "candidate"
        if trip.always:
            if on_stack:
                violation(trip.rule, trip.what)
                raise PermissionError(
                    f"blocked by the evaluation sandbox: {trip.what} ({trip.rule})"
                )
        elif STATE.active and key not in STATE.tripped and direct:
            violation(trip.rule, trip.what)
            if hook.armed.strict:  # hybrid tolerates host reads; strict stops them here
                raise PermissionError(f"blocked in strict mode: {trip.what} ({trip.rule})")
            STATE.tripped.add(key)  # recording-only wires stop checking after their first hit
    box.append(trip.original)


def _open(hook: Hook, args: tuple, frame: Any) -> None:
    _key, path, dir_fd, box = args
    resolved = audit_fs.resolve(path, dir_fd)
    if resolved is None:  # e.g. a dir_fd that is not a directory: let the real call fail
        resolved = path
    box.extend((hook.real_open, resolved))


_BUILTIN: dict[str, Handler] = {
    "tritonforge.trip": _trip,
    "tritonforge.open": _open,
    "tritonforge.import": import_guard.guarded_import,
    "tritonforge.load": import_guard.load,
}
