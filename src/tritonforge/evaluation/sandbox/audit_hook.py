"""PEP 578 audit hook and import guard: what candidate code may not do inside the sandbox.

Covers: attributing an interpreter event to its origin (the candidate's own code, a stdlib or
library function it called, or library internals), the rule each event falls under, whether it
is allowed for that origin, and the hook itself (blocks by raising PermissionError and records a
violation, so catching the exception does not hide it); `guard_module`, which gives the
candidate's module its own `__import__` that refuses the forbidden modules of checks.py even
when the import statement is hidden from the static rules.
Rules: network, process_spawn, signal_process, native_code, introspection, dynamic_code,
filesystem, forbidden_import (docs/security.md explains each).
Does not cover: tripwires and the launch recorder (audit.py), isolation (isolation.py).
The hook lives in the candidate's process: it raises the cost of an attack, it is not a wall.
"""

from __future__ import annotations

import builtins
import os
import sys
import sysconfig
from dataclasses import dataclass
from typing import Any

from tritonforge.evaluation.sandbox.audit_state import STATE, violation
from tritonforge.evaluation.sandbox.forbidden import FORBIDDEN_MODULES

_STDLIB = tuple(
    {
        q
        for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"])
        for q in (p, os.path.realpath(p))
    }
)
# stdlib modules whose internal use of frames / exec only reads module names or builds classes
# (namedtuple, dataclasses, enum, typing, warnings): allowed even when the candidate calls them
_SAFE_STDLIB = {
    "collections",
    "dataclasses",
    "enum",
    "typing",
    "abc",
    "warnings",
    "functools",
    "contextlib",
    "re",
    "string",
    "copyreg",
    "_collections_abc",
}
# The candidate's own `import` statements: the static list plus the evaluator and raw OS modules.
RUNTIME_FORBIDDEN = set(FORBIDDEN_MODULES) | {"tritonforge", "posix", "nt", "_posixsubprocess"}
# New imports (not yet in sys.modules) anywhere on the candidate's behalf.
_FORBIDDEN_IMPORTS = {
    "ctypes",
    "cffi",
    "subprocess",
    "_posixsubprocess",
    "socket",
    "_socket",
    "ssl",
    "multiprocessing",
    "pty",
    "urllib",
    "http",
    "requests",
    "httpx",
    "asyncio",
    "tritonforge",
}


@dataclass
class Origin:
    on_stack: bool  # a candidate frame is somewhere on the stack
    immediate: str  # kind of the frame that raised the event
    caller: str  # kind of that frame's caller
    nearest: str  # nearest kind that is not stdlib
    module: str  # top-level stdlib module of the immediate frame ('' if not stdlib)


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


_KINDS: dict[str, str] = {}  # filename -> kind (the candidate path is fixed once armed)


def _kind(filename: str) -> str:
    kind = _KINDS.get(filename)
    if kind is None:
        if filename == STATE.candidate_path:
            kind = "candidate"
        elif _stdlib_module(filename) is not None:
            kind = "stdlib"
        elif filename.startswith("<"):
            kind = "candidate"  # code compiled from a string: generated on someone's behalf
        else:
            kind = "triton" if f"{os.sep}triton{os.sep}" in filename else "library"
        if STATE.candidate_path:
            _KINDS[filename] = kind
    return kind


def immediate_kind(frame) -> str:
    """Kind of one frame only (cheap: no stack walk)."""
    if frame is None:
        return "none"
    busy, STATE.hook_busy = STATE.hook_busy, True
    try:
        return _kind(frame.f_code.co_filename)
    finally:
        STATE.hook_busy = busy


def caller_frame(depth: int):
    """The Python frame `depth` levels above the caller (sys._getframe audits itself)."""
    busy, STATE.hook_busy = STATE.hook_busy, True
    try:
        return sys._getframe(depth + 1)
    except ValueError:
        return None
    finally:
        STATE.hook_busy = busy


def origin(frame) -> Origin:
    """Where the event raised in `frame` comes from (see Origin)."""
    if not STATE.candidate_path or frame is None:
        return _NONE
    busy, STATE.hook_busy = STATE.hook_busy, True  # f_code/f_back reads raise audit events too
    try:
        name = frame.f_code.co_filename
        immediate = _kind(name)
        module = (_stdlib_module(name) or "") if immediate == "stdlib" else ""
        back = frame.f_back
        caller = _kind(back.f_code.co_filename) if back is not None else "none"
        nearest, f = "none", frame
        while f is not None:
            k = _kind(f.f_code.co_filename)
            if nearest == "none" and k != "stdlib":
                nearest = k
            if k == "candidate":
                return Origin(True, immediate, caller, nearest, module)
            f = f.f_back
        return Origin(False, immediate, caller, nearest, module)
    finally:
        STATE.hook_busy = busy


# ---------------------------------------------------------------------------------------------
# Events -> rules
# ---------------------------------------------------------------------------------------------

_NETWORK = {
    "socket.__new__",
    "socket.connect",
    "socket.bind",
    "socket.sendto",
    "socket.getaddrinfo",
    "socket.gethostbyname",
    "socket.sendmsg",
}
_SPAWN = {
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
_SIGNAL = {"os.kill", "os.killpg", "signal.pthread_kill"}
_FRAMES = {"sys._getframe", "sys._getframemodulename", "sys._current_frames"}
# making code and functions from bytes: the import system does it, the candidate may not
_MAKE_CODE = {"code.__new__", "function.__new__", "marshal.loads"}
_INTROSPECT = {
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "sys.settrace",
    "sys.setprofile",
    "sys.addaudithook",
    "cpython._PySys_ClearAuditHooks",
}
_RESTRICTED_ATTRS = {
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
# filesystem events and which of their arguments are paths
_FS_PATHS = {
    "open": (0,),
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.mkdir": (0,),
    "os.rename": (0, 1),
    "os.link": (0, 1),
    "os.symlink": (1,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.truncate": (0,),
    "os.utime": (0,),
    "os.chflags": (0,),
    "os.setxattr": (0,),
    "os.removexattr": (0,),
    "shutil.copyfile": (1,),
    "shutil.copymode": (1,),
    "shutil.copystat": (1,),
    "shutil.copytree": (1,),
    "shutil.move": (0, 1),
    "shutil.rmtree": (0,),
    "shutil.make_archive": (0,),
    "shutil.unpack_archive": (1,),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _writes(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def rule_for(event: str, args: tuple) -> str | None:
    if event in _NETWORK:
        return "network"
    if event in _SPAWN:
        return "process_spawn"
    if event in _SIGNAL:
        return "signal_process"
    if event.startswith("ctypes."):
        return "native_code"
    if event in _FRAMES or event in _INTROSPECT or event in _MAKE_CODE:
        return "introspection"
    if event == "object.__getattr__" and len(args) > 1 and args[1] in _RESTRICTED_ATTRS:
        return "introspection"
    if event in ("exec", "compile"):
        return "dynamic_code"
    if event in _FS_PATHS:
        return "filesystem"
    if event == "import" and args and str(args[0]).split(".")[0] in _FORBIDDEN_IMPORTS:
        return "forbidden_import"
    return None


def _inside_scratch(path: Any) -> bool:
    if isinstance(path, int):
        return True  # an fd the process already holds
    if not STATE.scratch:
        return False
    try:
        path = os.fsdecode(path)
        real = os.path.realpath(path if os.path.isabs(path) else os.path.join(os.getcwd(), path))
    except (OSError, ValueError, TypeError):
        return False
    return real == STATE.scratch or real.startswith(STATE.scratch.rstrip(os.sep) + os.sep)


def _bad_path(event: str, args: tuple) -> bool:
    if event == "open":
        path = args[0] if args else ""
        if isinstance(path, (str, bytes)) and os.fsdecode(path).startswith("/proc"):
            return True  # /proc/self/mem, /proc/<pid>/...: reading or patching memory
        writes = _writes(args[1] if len(args) > 1 else None, args[2] if len(args) > 2 else None)
        return writes and not _inside_scratch(path)
    return any(i < len(args) and not _inside_scratch(args[i]) for i in _FS_PATHS[event])


def _direct(o: Origin) -> bool:
    """The candidate did it, or called a stdlib/library function that did it on its behalf
    (a stdlib helper known to only read module names is not counted)."""
    if o.immediate == "candidate":
        return True
    return o.caller == "candidate" and not (o.immediate == "stdlib" and o.module in _SAFE_STDLIB)


def allowed(rule: str, event: str, args: tuple, o: Origin) -> bool:
    """Whether an event raised while candidate code is on the stack is still fine."""
    if rule == "introspection":
        if event in _FRAMES or event in _MAKE_CODE or event == "object.__getattr__":
            return not _direct(o)  # library internals use frames; handing them out is the risk
        return o.nearest != "candidate"
    if rule == "dynamic_code":
        return not _direct(o)  # namedtuple/dataclasses exec internally; timeit/runpy do not count
    if rule == "filesystem":
        return o.nearest != "candidate" or not _bad_path(event, args)
    if rule == "forbidden_import":
        return o.nearest != "candidate"
    if rule == "process_spawn":
        return o.nearest in STATE.allow_spawn_from  # Triton running ptxas / a C compiler
    if rule == "native_code":
        return o.nearest in ("triton", "library")  # torch/triton loading their own libraries
    return False  # network, signals: never on behalf of the candidate


def _short_args(args: tuple) -> str:
    try:
        return repr(args)[:120]
    except Exception:
        return "<args>"


def hook(event: str, args: tuple) -> None:
    if STATE.hook_busy or not STATE.candidate_path:
        return
    rule = rule_for(event, args)
    if rule is None:
        return
    o = origin(caller_frame(1))
    if not o.on_stack or allowed(rule, event, args, o):
        return
    violation(rule, f"{event} {_short_args(args)}")
    raise PermissionError(f"blocked by the evaluation sandbox: {event} ({rule})")


# ---------------------------------------------------------------------------------------------
# The candidate's own import statements
# ---------------------------------------------------------------------------------------------


def _guarded_import(real_import):
    def __import__(name, globals=None, locals=None, fromlist=(), level=0):
        if level or str(name).split(".")[0] in RUNTIME_FORBIDDEN:
            what = "relative import" if level else f"import of {name}"
            violation("forbidden_import", f"{what} by the candidate")
            raise ImportError(f"blocked by the evaluation sandbox: {what} is not allowed")
        return real_import(name, globals, locals, fromlist, level)

    return __import__


def guard_module(module_dict: dict[str, Any]) -> None:
    """Give the candidate's module (before it executes) builtins whose __import__ is guarded."""
    own = dict(builtins.__dict__)
    own["__import__"] = _guarded_import(builtins.__import__)
    module_dict["__builtins__"] = own
