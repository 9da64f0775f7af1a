"""Wire protocol between the judge and a sandboxed worker: framed JSON plus memfd tensors.

Covers: length-prefixed JSON messages over a Unix socket with file descriptors attached
(SCM_RIGHTS); packing nested values (tensors, scalars, lists, tuples) into one sealed memfd and a
JSON descriptor; unpacking them defensively (sizes, dtypes, counts all checked; nothing is ever
unpickled); the timing clocks a `time` message may name (CLOCKS). Does not cover: what the
messages mean (see sandbox/worker.py and judge/evaluator.py).

The judge never trusts what comes back: descriptors are validated against the fd's real size and
tensors are copied out of the mapping before use.
"""

from __future__ import annotations

import json
import mmap
import os
import socket
import time
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from tritonforge.evaluation.sandbox import captured as cap

# Tensor functions from torch's immutable C base class, taken before any candidate code exists:
# the worker packs a candidate's outputs with these (a patched torch.Tensor method never runs).
_TB = torch._C.TensorBase
_dtype_of = _TB.dtype.__get__
_frombuffer = torch.frombuffer
_uint8 = torch.uint8


@dataclass(frozen=True)
class Clock:
    """A timing clock named in `time` messages (sandbox/timing_loop.py runs it): CUDA events
    or host time; with events, whether the call is queued behind a device-side lead (host
    launch time hidden)."""

    events: bool
    lead: bool


CLOCKS: dict[str, Clock] = {
    "cuda_events": Clock(events=True, lead=True),
    "cuda_events_idle": Clock(events=True, lead=False),
    "host": Clock(events=False, lead=False),
}
DEVICE_CLOCKS = frozenset(k for k, c in CLOCKS.items() if c.events)
# parts of a timed trial's host time a `time` reply reports (`parts_ms`, diagnostics only): the
# L2 flush and its synchronize, the events and lead with the audit's begin, the call's enqueue,
# the wait for the device, the audit's end
TRIAL_PARTS = ("flush", "lead", "call", "wait", "after")

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
COPY_WINDOW_BYTES = 256 * 1024 * 1024  # unpack copies a memfd this much at a time
MAX_FDS = 4
MAX_TENSORS = 64
MAX_DEPTH = 6

DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
    "complex64": torch.complex64,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


class ProtocolError(Exception):
    """The peer sent something malformed, too large, or nothing before the deadline."""


class PeerClosed(ProtocolError):
    """The peer closed its end (usually: the worker died)."""


class Deadline(ProtocolError):
    """No complete message before the deadline."""


# ---------------------------------------------------------------------------------------------
# Framing
# ---------------------------------------------------------------------------------------------


def send_msg(sock: socket.socket, obj: dict[str, Any], fds: list[int] | None = None) -> None:
    """Send one JSON object (and optional fds with its first byte). Every call here is one the
    fork server captured before any candidate existed (captured.py)."""
    body = cap.dumps(obj).encode()
    if len(body) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {len(body)} bytes exceeds {MAX_MESSAGE_BYTES}")
    data = cap.U32.pack(len(body)) + body
    if fds:
        anc = [(cap.SOL_SOCKET, cap.SCM_RIGHTS, cap.IntArray("i", fds).tobytes())]
        sent = cap.sendmsg(sock, [data[:1]], anc)
        data = data[sent:]
    cap.sendall(sock, data)


def _readable(sock: socket.socket, timeout: float | None) -> bool:
    """Whether `sock` has data (or an end) within `timeout` seconds (None: wait). poll, not
    select: select() refuses descriptors numbered 1024 and above, which a judge holding many
    cached cases' memfds reaches."""
    p = cap.poll()
    p.register(sock.fileno(), cap.POLL_READABLE)
    return bool(p.poll(None if timeout is None else max(0, int(timeout * 1000 + 0.999))))


class Reader:
    """Incremental reader of framed messages with deadlines (one per socket, one thread)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = bytearray()
        self.fds: list[int] = []

    def _fill(self, deadline: float | None) -> None:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not _readable(self.sock, timeout):
            raise Deadline("deadline passed while waiting for a message")
        fd_size = cap.IntArray("i").itemsize * MAX_FDS
        try:
            data, anc, _flags, _addr = cap.recvmsg(self.sock, 1 << 20, cap.CMSG_SPACE(fd_size))
        except ConnectionResetError as exc:
            raise PeerClosed("connection reset") from exc
        for level, kind, payload in anc:
            if level == cap.SOL_SOCKET and kind == cap.SCM_RIGHTS:
                got = cap.IntArray("i")
                got.frombytes(payload[: len(payload) - (len(payload) % got.itemsize)])
                self.fds.extend(got.tolist())
        if len(self.fds) > 4 * MAX_FDS:
            self.close_fds()
            raise ProtocolError("peer sent too many file descriptors")
        if not data:
            raise PeerClosed("peer closed the connection")
        self.buf.extend(data)
        if len(self.buf) > MAX_MESSAGE_BYTES + 4:
            raise ProtocolError("peer sent an oversized message")

    def recv(self, deadline: float | None = None) -> tuple[dict[str, Any], list[int]]:
        """Next message and the fds that arrived with it (caller owns and closes the fds)."""
        while len(self.buf) < 4:
            self._fill(deadline)
        (size,) = cap.U32.unpack_from(self.buf, 0)
        if size > MAX_MESSAGE_BYTES:
            raise ProtocolError(f"peer announced a {size}-byte message")
        while len(self.buf) < 4 + size:
            self._fill(deadline)
        body = bytes(self.buf[4 : 4 + size])
        del self.buf[: 4 + size]
        fds, self.fds = self.fds, []
        try:
            obj = cap.loads(body.decode())
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            for fd in fds:
                os.close(fd)
            raise ProtocolError(f"peer sent invalid JSON: {exc}") from None
        if not isinstance(obj, dict):
            for fd in fds:
                os.close(fd)
            raise ProtocolError("peer sent a non-object message")
        return obj, fds

    def pending(self) -> bool:
        """Unread bytes are buffered or waiting on the socket (used to detect injected frames)."""
        if self.buf:
            return True
        return _readable(self.sock, 0.0)

    def close_fds(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []


# ---------------------------------------------------------------------------------------------
# Values <-> (descriptor, memfd)
# ---------------------------------------------------------------------------------------------


def _collect(value: Any, tensors: list[torch.Tensor], depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise ProtocolError("value nested too deeply")
    if isinstance(value, torch.Tensor):
        if _dtype_of(value) not in DTYPE_NAMES:
            raise ProtocolError(f"unsupported tensor dtype {_dtype_of(value)}")
        if len(tensors) >= MAX_TENSORS:
            raise ProtocolError(f"more than {MAX_TENSORS} tensors")
        tensors.append(value)
        return {"t": "tensor", "i": len(tensors) - 1}
    if isinstance(value, bool) or value is None:
        return {"t": "const", "v": value}
    if isinstance(value, (int, float)):
        return {"t": "num", "v": value}
    if isinstance(value, str):
        return {"t": "str", "v": value[:1000]}
    if isinstance(value, (list, tuple)):
        return {
            "t": "tuple" if isinstance(value, tuple) else "list",
            "v": [_collect(x, tensors, depth + 1) for x in value],
        }
    if _is_hf_config(value):  # a level-4 init input: travels as its JSON dict
        return {"t": "hf_config", "v": json.loads(value.to_json_string(use_diff=False))}
    raise ProtocolError(f"cannot transfer a value of type {type(value).__name__}")


def _is_hf_config(value: Any) -> bool:
    """A transformers PretrainedConfig, recognised without importing transformers."""
    names = {"PretrainedConfig", "PreTrainedConfig"}  # transformers 4 and 5
    return any(c.__name__ in names for c in type(value).__mro__) and hasattr(
        value, "to_json_string"
    )


def _hf_config(v: Any) -> Any:
    """Rebuild a transformers config from its dict (trusted direction only: judge -> worker)."""
    if not isinstance(v, dict) or not isinstance(v.get("model_type"), str):
        raise ProtocolError("bad hf_config")
    from transformers import AutoConfig

    return AutoConfig.for_model(**v)


def _layout(value: Any) -> tuple[Any, list[torch.Tensor], list[dict[str, Any]], int]:
    """The descriptor tree, contiguous sources and metas of `value`, and the bytes it needs
    (each tensor at a 64-byte aligned offset)."""
    tensors: list[torch.Tensor] = []
    tree = _collect(value, tensors)
    metas, offset = [], 0
    sources: list[torch.Tensor] = []
    for t in tensors:
        h = _TB.contiguous(_TB.detach(t))
        nbytes = _TB.numel(h) * _TB.element_size(h)
        metas.append(
            {
                "dtype": DTYPE_NAMES[_dtype_of(h)],
                "shape": list(_TB.size(h)),
                "strides": list(_TB.stride(t)),
                "offset": offset,
                "nbytes": nbytes,
            }
        )
        sources.append(h)
        offset += _aligned(nbytes)
    return tree, sources, metas, offset


def _aligned(nbytes: int) -> int:
    return (nbytes + 63) // 64 * 64


def packed_size(value: Any) -> int:
    """Bytes `pack`/`pack_into` need for `value` (each tensor 64-byte aligned)."""
    return sum(_aligned(t.numel() * t.element_size()) for t in flatten_tensors(value))


def _write(dest: torch.Tensor, sources: list[torch.Tensor], metas: list[dict[str, Any]]) -> None:
    """Copy each source's bytes into the flat uint8 `dest` at its meta's offset."""
    for h, meta in zip(sources, metas):
        if meta["nbytes"]:
            part = _TB.__getitem__(dest, slice(meta["offset"], meta["offset"] + meta["nbytes"]))
            flat = _TB.view(h, -1) if _TB.dim(h) else _TB.reshape(h, (1,))
            _TB.copy_(part, _TB.view(flat, _uint8))


def pack(value: Any, seal: bool = True) -> tuple[dict[str, Any], int]:
    """Write all tensors in `value` (contiguous, copied to host) into one memfd.

    Returns (descriptor, fd). The fd is sealed read-only when `seal` so a receiver can map it but
    never change it. The caller closes the fd after sending. Device tensors are copied straight
    into the shared mapping (one device-to-host copy, no staging buffer).
    """
    tree, sources, metas, offset = _layout(value)
    fd = cap.memfd_create("tf-values", cap.MFD_FLAGS)
    cap.ftruncate(fd, max(offset, 1))
    if offset:
        with cap.Mmap(fd, offset, cap.MAP_SHARED, cap.PROT_RW) as mm:
            view = _frombuffer(mm, dtype=_uint8, count=offset)
            _write(view, sources, metas)
            del view
    if seal:
        cap.fcntl_call(fd, cap.F_ADD_SEALS, cap.ALL_SEALS)
    return {"tree": tree, "tensors": metas, "size": offset}, fd


def pack_into(value: Any, buf: torch.Tensor) -> dict[str, Any] | None:
    """Write all tensors in `value` into the flat uint8 tensor `buf` (a shared device buffer)
    with the layout `pack` uses. Returns the descriptor, or None when they do not fit."""
    tree, sources, metas, offset = _layout(value)
    if offset > _TB.numel(buf):
        return None
    _write(buf, sources, metas)
    return {"tree": tree, "tensors": metas, "size": offset}


def unpack(
    desc: dict[str, Any],
    fd: int,
    keep_strides: bool = False,
    device: str | None = None,
    objects: bool = False,
) -> Any:
    """Rebuild the value described by `desc` from `fd`, copying tensors into private memory:
    host memory, or with `device` (e.g. "cuda:0") straight into device memory (one copy).
    `objects`: also rebuild Hugging Face configs (only for what the judge sends).

    Validates every field: an attacker-controlled descriptor can at worst raise ProtocolError.
    """
    size = os.fstat(fd).st_size
    mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ) if size else None
    on_device = device is not None and device != "cpu"

    def region(offset: int, nbytes: int) -> torch.Tensor:
        dest = torch.empty(nbytes, dtype=torch.uint8, device=device if on_device else "cpu")
        assert mm is not None  # nbytes > 0 only with a non-empty buffer
        copy_windows(mm, offset, dest)
        return dest

    try:
        return _unpack(desc, size, region, keep_strides, device if on_device else "cpu", objects)
    finally:
        if mm is not None:
            mm.close()


def copy_windows(mm: mmap.mmap, offset: int, dest: torch.Tensor, window: int = 0) -> None:
    """Copy `dest.numel()` bytes of `mm` from `offset` into the flat uint8 `dest`, a window at a
    time, each window's pages dropped from this process's mapping once copied
    (MADV_DONTNEED: the memfd keeps them). The process's resident memory then grows by at most
    one window, not by the whole buffer: a 16 GiB input copied to the device no longer counts
    16 GiB against the worker's resident-memory limit (it killed the timing process)."""
    window = window or COPY_WINDOW_BYTES
    nbytes = dest.numel()
    for a in range(0, nbytes, window):
        b = min(nbytes, a + window)
        with warnings.catch_warnings():  # read-only mapping; copied out at once
            warnings.simplefilter("ignore", UserWarning)
            raw = torch.frombuffer(mm, dtype=torch.uint8, count=b - a, offset=offset + a)
            # synchronous: the mapping may be closed (or changed) once it returns
            dest[a:b].copy_(raw)
        del raw
        start = (offset + a) // mmap.PAGESIZE * mmap.PAGESIZE
        mm.madvise(mmap.MADV_DONTNEED, start, offset + b - start)


def unpack_buffer(
    desc: dict[str, Any], buf: torch.Tensor, keep_strides: bool = False, copy: bool = True
) -> Any:
    """Rebuild the value described by `desc` from the flat uint8 tensor `buf` (a shared device
    buffer): private copies with `copy` (the judge), views of `buf` without (the worker's
    inputs, zero-copy). Validated like `unpack`."""

    def region(offset: int, nbytes: int) -> torch.Tensor:
        part = buf[offset : offset + nbytes]
        return part.clone() if copy else part

    return _unpack(desc, buf.numel(), region, keep_strides, str(buf.device))


def _unpack(
    desc: Any, size: int, region: Any, keep_strides: bool, device: str, objects: bool = False
) -> Any:
    if not isinstance(desc, dict) or not isinstance(desc.get("tensors"), list):
        raise ProtocolError("descriptor without a tensor list")
    metas = desc["tensors"]
    if len(metas) > MAX_TENSORS:
        raise ProtocolError("too many tensors in descriptor")
    # the tensors together cannot hold more than the buffer: overlapping regions copied many
    # times over would let a worker make the judge allocate far more than it sent
    total = sum(m.get("nbytes") for m in metas if isinstance(m, dict) and _is_int(m.get("nbytes")))
    if total > size:
        raise ProtocolError("tensor descriptors claim more bytes than the shared buffer holds")
    try:
        tensors = [_tensor_from(meta, size, region, keep_strides, device) for meta in metas]
    except torch.OutOfMemoryError:
        raise  # the receiver's memory, not a bad descriptor (the judge's: a judge fault)
    except (TypeError, ValueError, OverflowError, RuntimeError) as exc:  # e.g. absurd shapes
        first = (str(exc).splitlines() or [""])[0]
        raise ProtocolError(f"bad tensor descriptor: {type(exc).__name__}: {first}"[:300]) from None
    return _build(desc.get("tree"), tensors, 0, objects)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _tensor_from(
    meta: Any, size: int, region: Any, keep_strides: bool, device: str
) -> torch.Tensor:
    if not isinstance(meta, dict):
        raise ProtocolError("bad tensor descriptor")
    name = meta.get("dtype")
    dtype = DTYPES.get(name) if isinstance(name, str) else None  # a list would raise TypeError
    shape = meta.get("shape")
    offset, nbytes = meta.get("offset"), meta.get("nbytes")
    if (
        dtype is None
        or not isinstance(shape, list)
        or not all(isinstance(s, int) and s >= 0 for s in shape)
    ):
        raise ProtocolError(f"bad tensor descriptor {str(meta)[:200]}")
    if len(shape) > 16 or not isinstance(offset, int) or not isinstance(nbytes, int) or offset < 0:
        raise ProtocolError("bad tensor geometry")
    numel = 1
    for s in shape:
        numel *= s
    itemsize = torch.empty((), dtype=dtype).element_size()
    if numel * itemsize != nbytes or offset + nbytes > size:
        raise ProtocolError("tensor descriptor does not fit the shared buffer")
    if nbytes == 0:
        out = torch.empty(shape, dtype=dtype, device=device)
    else:
        if offset % itemsize:
            raise ProtocolError("tensor offset not aligned to its dtype")
        out = region(offset, nbytes).view(dtype).reshape(shape)
    strides = meta.get("strides")
    if (
        keep_strides
        and isinstance(strides, list)
        and len(strides) == len(shape)
        and strides != list(out.stride())
    ):
        if all(isinstance(s, int) and s >= 0 for s in strides):
            try:
                strided = torch.empty_strided(shape, strides, dtype=dtype, device=out.device)
                strided.copy_(out)
                out = strided
            except RuntimeError:
                pass
    return out


def _build(node: Any, tensors: list[torch.Tensor], depth: int, objects: bool = False) -> Any:
    if depth > MAX_DEPTH or not isinstance(node, dict):
        raise ProtocolError("bad value tree")
    kind = node.get("t")
    if kind == "tensor":
        i = node.get("i")
        if not isinstance(i, int) or not 0 <= i < len(tensors):
            raise ProtocolError("bad tensor index")
        return tensors[i]
    if kind in ("const", "num", "str"):
        v = node.get("v")
        if kind == "num" and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ProtocolError("bad number")
        return v
    if kind in ("list", "tuple"):
        items = node.get("v")
        if not isinstance(items, list) or len(items) > 4 * MAX_TENSORS:
            raise ProtocolError("bad sequence")
        built = [_build(x, tensors, depth + 1, objects) for x in items]
        return tuple(built) if kind == "tuple" else built
    if kind == "hf_config" and objects:
        return _hf_config(node.get("v"))
    raise ProtocolError(f"unknown value kind {kind!r}")


def flatten_tensors(value: Any) -> list[torch.Tensor]:
    """All tensors of a nested value in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        out: list[torch.Tensor] = []
        for v in value:
            out.extend(flatten_tensors(v))
        return out
    return []


def map_tensors(value: Any, fn) -> Any:
    """Apply fn to every tensor of a nested value, keeping the structure."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple):
        return tuple(map_tensors(v, fn) for v in value)
    if isinstance(value, list):
        return [map_tensors(v, fn) for v in value]
    return value
