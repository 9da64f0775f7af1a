"""Test-only: run the rlimits sandbox on a machine whose interpreter `nobody` cannot reach.

The rlimits sandbox runs candidates as `nobody` and refuses to run them when `nobody` cannot
enter the interpreter's folders (e.g. a pyenv under a 0700 /root). To still exercise that
sandbox here, `sandbox_evaluator` gives an Evaluator a fork server started through this file:
as a script (`python nobody_python.py -m tritonforge.evaluation.sandbox.zygote FD`) it enters a
private mount namespace, puts a 0755 tmpfs over each blocking folder with only the
interpreter's folders re-attached inside (as the namespace sandbox does for its workers), then
execs the real interpreter. The workers share that view of the filesystem and nothing else: no
pid, network, ipc or user namespace, so the rlimits sandbox is tested as it runs in production
on a machine where `nobody` can reach the interpreter. Needs root (mount namespace).

Covers: `needs_exposing`, `sandbox_evaluator` (an Evaluator whose fork server starts through
this file in the rlimits sandbox). Does not cover: the sandbox itself (sandbox/isolation.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

HERE = os.path.abspath(__file__)


def needs_exposing() -> str | None:
    """The folder blocking `nobody` from this interpreter, or None."""
    from tritonforge.evaluation.sandbox.identity import unreachable_interpreter

    return unreachable_interpreter()


@contextlib.contextmanager
def sandbox_evaluator(settings: Any, extra_env: dict[str, str] | None = None) -> Iterator[Any]:
    """An Evaluator for `settings` on the CPU. In the rlimits sandbox its fork server is started
    through this file when `nobody` cannot reach the interpreter (the test is skipped when that
    needs root and we are not); `extra_env` joins the fork server's environment (e.g.
    TRITONFORGE_CGROUPS=0 for the watchdog fallback)."""
    import pytest

    from tritonforge.evaluation.judge import forkserver, resources
    from tritonforge.evaluation.judge.evaluator import Evaluator

    launcher = None
    if settings.sandbox == "rlimits" and needs_exposing() is not None:
        if os.geteuid() != 0:
            pytest.skip("`nobody` cannot reach the interpreter, and exposing it needs root")
        fd, launcher = tempfile.mkstemp(prefix="tf-nobody-python-", suffix=".sh")
        os.write(fd, f'#!/bin/sh\nexec "{sys.executable}" "{HERE}" "$@"\n'.encode())
        os.close(fd)
        os.chmod(launcher, stat.S_IRWXU)
    try:
        with Evaluator(settings) as ev:
            python = launcher

            class Server(forkserver.ForkServer):
                def __init__(self, env: dict[str, str], _python: str | None = None):
                    super().__init__({**env, **(extra_env or {})}, python)

            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(resources, "ForkServer", Server)
                ev.resources("cpu")  # made now, kept (and restarted alike) for its lifetime
            yield ev
    finally:
        if launcher is not None:
            os.unlink(launcher)


def _expose() -> None:
    from tritonforge.evaluation.sandbox import identity, isolation

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(isolation.CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    if isolation._mount(None, "/", None, isolation.MS_REC | isolation.MS_PRIVATE) != 0:
        raise OSError(ctypes.get_errno(), "make / private")
    paths = {p: identity.blocked_ancestor(p) for p in identity.interpreter_paths()}
    paths = {p: b for p, b in paths.items() if b}
    tops = [p for p in paths if not any(p != q and isolation._under(p, q) for q in paths)]
    clones = [(p, isolation._clone_tree(p)) for p in tops]
    for blocked in sorted(set(paths.values())):
        flags = isolation.MS_NOSUID | isolation.MS_NODEV
        if isolation._mount("tmpfs", blocked, "tmpfs", flags, "size=1m,mode=0755") != 0:
            raise OSError(ctypes.get_errno(), f"tmpfs on {blocked}")
    for p, fd in clones:
        isolation._attach(fd, p)
        os.close(fd)


if __name__ == "__main__":
    _expose()
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
