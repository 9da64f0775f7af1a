"""The only audit code the candidate can reach: small stubs installed into torch, Triton and os.

Covers: stub factories for tripwires, the Triton launch entry points, @triton.autotune's
benchmark, `os.open` (dir_fd resolution), thread starts (Python 3.11 has no audit event for
them), the candidate's guarded `__import__`, the import system's module loads, and `Lineage`, the dispatch mode of output
provenance. A stub holds no audit state and no original function: it raises a
`tritonforge.*` audit event with a fresh `box` list, and the audit hook (audit_hook.py), whose
state nothing reachable refers to, records what it must, raises PermissionError to block, or
puts the callable to run into the box. The hook accepts these events only from the stubs' own
code objects (a forged `sys.audit("tritonforge...")` is a violation).

Why this matters: a function's `__globals__` and `__closure__` can be read without any audit
event, so whatever a reachable function refers to is reachable too. Here that is this module's
namespace: `_audit` (`sys.audit`), the factories and `Lineage`. Rebinding them only switches a
stub off, and a stub switched off has nothing to call (empty box): it fails instead of running
unaudited. Does not cover: what the events mean (audit_hook.py, audit.py, audit_launch.py).
"""

from __future__ import annotations

import sys
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

_audit = sys.audit


def tripwire(key: int) -> Any:
    """A stand-in for a library function: the hook decides (record, block) and hands back the
    original; `key` names the entry in the hook's private table."""

    def wire(*args, **kwargs):
        box: list[Any] = []
        _audit("tritonforge.trip", key, box)
        return box[0](*args, **kwargs)

    return wire


def launch_entry(key: int) -> Any:
    """`JITFunction.run` / `InterpretedFunction.run`: every kernel launch passes here."""

    def run(self, *args, **kwargs):
        box: list[Any] = []
        _audit("tritonforge.launch", key, self, args, kwargs, box)
        if not box[1:]:  # light mode: counted, nothing to finish (no builtin looked up)
            return box[0](self, *args, **kwargs)
        ok = False
        try:
            result = box[0](self, *args, **kwargs)
            ok = True
            return result
        finally:  # the hook sees the launch finish (snapshots, markers)
            _audit("tritonforge.launched", key, box, ok)

    return run


def launcher_entry(key: int) -> Any:
    """`CompileResult._gen_launcher_code` of the Inductor runtime: the launcher it builds for a
    compiled kernel gets a `runner_entry` in place of the kernel's runner (the hook decides)."""

    def _gen_launcher_code(self, scope, def_args, runner_args):
        box: list[Any] = []
        _audit("tritonforge.launcher", key, self, scope, runner_args, box)
        return box[0](self, scope, def_args, runner_args)

    return _gen_launcher_code


def runner_entry(key: int) -> Any:
    """A compiled kernel's runner inside an Inductor launcher (on a GPU the autotuner launches
    through these, never through `JITFunction.run`): every such launch passes here. The runner
    itself runs outside the launch window, as the candidate's own code would."""

    def runner(*args):
        box: list[Any] = []
        _audit("tritonforge.runner", key, args, box)
        if not box[1:]:  # light mode: counted, nothing to finish (no builtin looked up)
            return box[0](*args)
        ok = False
        try:
            result = box[0](*args)
            ok = True
            return result
        finally:
            _audit("tritonforge.ran", key, box, ok)

    return runner


def bench_entry(key: int) -> Any:
    """`Autotuner._bench`: config benchmarking runs in light mode (counted, not recorded)."""

    def _bench(self, *args, **kwargs):
        box: list[Any] = []
        _audit("tritonforge.tune", key, box)
        try:
            return box[0](self, *args, **kwargs)
        finally:
            _audit("tritonforge.tuned", key, box)

    return _bench


def bench_property(key: int) -> Any:
    """`Autotuner.do_bench`: the autotuner's own benchmark if it has one, else ours."""

    def do_bench(self):
        box: list[Any] = []
        _audit("tritonforge.trip", key, box)
        return self._do_bench or box[0]

    return property(do_bench)


def memory_entry(key: int) -> Any:
    """The CPU interpreter's raw memory access (`load`, `store`, atomics): every address is
    checked against the buffers of the launch in progress."""

    def access(*args):
        box: list[Any] = []
        _audit("tritonforge.memory", key, args, box)
        return box[0](*args)

    return access


def os_open(key: int) -> Any:
    """`os.open`: a name relative to `dir_fd` (or to the cwd) is resolved to an absolute path
    before the real call, so the hook judges the file that is really opened."""

    def open(path, flags, mode=0o777, *, dir_fd=None):
        box: list[Any] = []
        _audit("tritonforge.open", key, path, dir_fd, box)
        return box[0](box[1], flags, mode)

    return open


def guarded_import(key: int) -> Any:
    """The candidate module's own `__import__`: every import statement of the candidate, also of
    a module already loaded, is checked against the allowlist (relative imports refused)."""

    def __import__(name, globals=None, locals=None, fromlist=(), level=0):
        box: list[Any] = []
        _audit("tritonforge.import", key, name, fromlist, level, box)
        return box[0](name, globals, locals, fromlist, level)

    return __import__


def load_entry(key: int) -> Any:
    """`importlib._bootstrap._find_and_load`: every new module load, whatever the route (import
    statements, `importlib.import_module`, `__import__`); the hook decides (import_guard.py)."""

    def _find_and_load(name, import_):
        box: list[Any] = []
        _audit("tritonforge.load", key, name, box)
        return box[0](name, import_)

    return _find_and_load


def _dispatch(self, func, types, args=(), kwargs=None):
    kwargs = kwargs or {}
    result = func(*args, **kwargs)
    _audit("tritonforge.dispatch", func, args, kwargs, result)
    return result


class Lineage(TorchDispatchMode):
    """Sees every aten op the candidate runs during an audited forward (outside our launches);
    the hook turns each into provenance facts (lineage.py). Switching it off only makes outputs
    look un-written. (torch wraps `__torch_dispatch__`; the code that raises is `_dispatch`.)"""

    __torch_dispatch__ = _dispatch


STUB_CODES = (
    tripwire(0).__code__,
    launch_entry(0).__code__,
    launcher_entry(0).__code__,
    runner_entry(0).__code__,
    bench_entry(0).__code__,
    bench_property(0).fget.__code__,
    memory_entry(0).__code__,
    os_open(0).__code__,
    guarded_import(0).__code__,
    load_entry(0).__code__,
    _dispatch.__code__,
)
