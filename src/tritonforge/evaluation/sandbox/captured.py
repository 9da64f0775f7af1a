"""What the worker itself uses once the candidate is imported, captured in the fork server before
any candidate exists, so that rebinding a shared stdlib name changes nothing the worker sends.

The candidate shares every loaded module with the worker: rebinding `json.dumps`,
`hashlib.sha256`, `secrets.token_hex`, `struct.pack`, a method of the Python class
`socket.socket`, or a builtin (`builtins.len`, `builtins.sorted`) would otherwise rewrite what the
worker computes and reports. Covers:
- `private_builtins()`: every module of the package loaded after it runs in the fork server
  (the whole worker) looks builtins up in a private copy of the builtins namespace, which no
  reachable object refers to (this module takes its copy first, on its own first line);
- the reply codec: `dumps`/`loads` on `_json`'s C encoder and scanner, built once here (the
  Python-level `json` functions read module globals such as `json.encoder.c_make_encoder` at
  call time); framing with a C `struct.Struct`; the socket calls taken from the C base class
  `_socket.socket`; `select`, `array`, and the `os`/`fcntl`/`mmap` calls of memfd packing;
- `sha256` for launch signatures and the glue digest, and `token()` for the profiler markers'
  secret (from `os.urandom`, not `secrets`, whose `token_hex` reads `secrets._sysrand` and
  `random._urandom` at call time).
All of these are C functions or C types: their behaviour cannot be patched, only the names that
lead to them. Does not cover: torch functions (sealed.py captures those), or what the candidate
can do to the process by other means (docs/security.md).
"""

from __future__ import annotations

import builtins as _real_builtins
import importlib.machinery
import importlib.util
import sys
from typing import Any

# Modules whose functions the candidate reaches (stubs installed in torch, Triton and the import
# system; Inductor's restored `grid`): a function's `__builtins__` can be read without an audit
# event, so they keep the shared builtins (stubs.py looks none up when called).
_OWN_BUILTINS = frozenset(
    {"tritonforge.evaluation.sandbox.stubs", "tritonforge.evaluation.sandbox.inductor_compat"}
)


class _Loader(importlib.machinery.SourceFileLoader):
    """Runs a module of the package with the private builtins."""

    def exec_module(self, module: Any) -> None:
        if module.__name__ not in _OWN_BUILTINS:
            module.__dict__["__builtins__"] = _PRIVATE
        super().exec_module(module)


class _Finder:
    """Finds the package's modules (after those already loaded) with `_Loader`."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> Any:
        if not name.startswith("tritonforge."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader:
            return spec
        return importlib.util.spec_from_file_location(
            name,
            spec.origin,
            loader=_Loader(name, spec.origin),
            submodule_search_locations=spec.submodule_search_locations,
        )


_INSTALLED: list[bool] = []


def private_builtins() -> None:
    """In the fork server, before the worker's modules are imported: they (and any module of
    the package loaded later) look builtins up in the private copy. Once per process."""
    if not _INSTALLED:
        sys.meta_path.insert(0, _Finder)
        _INSTALLED.append(True)


# Everything below: this module's own functions look builtins up in the private copy. The finder
# and loader above are reachable (sys.meta_path, each module's __spec__) and keep the shared one.
_PRIVATE: dict[str, Any] = dict(_real_builtins.__dict__)
__builtins__ = _PRIVATE

import _json  # noqa: E402
import _socket  # noqa: E402
import array  # noqa: E402
import fcntl  # noqa: E402
import hashlib  # noqa: E402
import json.decoder  # noqa: E402
import mmap  # noqa: E402
import os  # noqa: E402
import select  # noqa: E402
import struct  # noqa: E402


def _no_default(value: Any) -> Any:
    raise TypeError(f"cannot send a value of type {type(value).__name__}")


_encoders = {
    keys: _json.make_encoder(
        None, _no_default, _json.encode_basestring_ascii, None, ":", ",", keys, False, True
    )
    for keys in (False, True)
}
_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_scan = json.decoder.JSONDecoder(parse_constant=_CONSTANTS.__getitem__).scan_once
_join = "".join


def dumps(obj: Any, sort_keys: bool = False) -> str:
    """Compact JSON (NaN and infinities allowed), as json.dumps(obj, separators=(",", ":"))."""
    return _join(_encoders[sort_keys is True](obj, 0))


def loads(text: str) -> Any:
    """One JSON value that fills `text` exactly (ValueError otherwise)."""
    try:
        value, end = _scan(text, 0)
    except StopIteration as exc:
        raise ValueError(f"invalid JSON at {exc.value}") from None
    if end != len(text):
        raise ValueError(f"extra data at {end}")
    return value


U32 = struct.Struct("<I")  # message length prefix
sendmsg = _socket.socket.sendmsg
sendall = _socket.socket.sendall
recvmsg = _socket.socket.recvmsg
SOL_SOCKET = _socket.SOL_SOCKET
SCM_RIGHTS = _socket.SCM_RIGHTS
CMSG_SPACE = _socket.CMSG_SPACE
select_fds = select.select
poll = select.poll  # (the protocol's reader: any descriptor number, unlike select)
POLL_READABLE = select.POLLIN | select.POLLHUP | select.POLLERR
IntArray = array.array
memfd_create = os.memfd_create
ftruncate = os.ftruncate
fstat = os.fstat
MFD_FLAGS = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
fcntl_call = fcntl.fcntl
ALL_SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
F_ADD_SEALS = fcntl.F_ADD_SEALS
Mmap = mmap.mmap
MAP_SHARED = mmap.MAP_SHARED
PROT_RW = mmap.PROT_READ | mmap.PROT_WRITE
sha256 = hashlib.sha256
_urandom = os.urandom


def token(nbytes: int = 8) -> str:
    """A fresh random hex token (the profiler markers' secret)."""
    return _urandom(nbytes).hex()
