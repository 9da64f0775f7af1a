"""How one evaluation's tensors travel between the judge and its worker (judge side).

Covers: `Transport`, owned by a Session. On a GPU it offers the worker two shared device buffers
with the `load` request (inputs in, outputs out; devshare.py), checks that the worker really
mapped them (a token written by the judge, read back and echoed into the output buffer), and then
sends each case by one device-to-device copy instead of a host round trip. Outputs the worker
wrote there are copied once into the judge's private memory before they are compared; the input
buffer is compared with the judge's own copy after every trial (a mutation check the worker
cannot influence). Where device sharing is unavailable (CPU, a driver or sandbox without VMM file
descriptors, `transport = "memfd"`), everything goes through sealed host memfds as before.

Does not cover: value layout and validation (protocol.py), the driver calls (devshare.py).
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from tritonforge.evaluation.judge.gpu_lock import judge_device
from tritonforge.evaluation.judge.reference import Case
from tritonforge.evaluation.judge.requests import Carry, SharedOffer
from tritonforge.evaluation.sandbox.devshare import TOKEN_BYTES, DevShareError, ExportedBuffer
from tritonforge.evaluation.sandbox.protocol import (
    ProtocolError,
    pack_into,
    packed_size,
    unpack,
    unpack_buffer,
)
from tritonforge.logging_setup import get_logger

log = get_logger("evaluation.transport")
_WARNED: set[str] = set()
_WARN_LOCK = threading.Lock()


class Transport:
    """Memfds always; shared device buffers once the worker has proved it mapped them."""

    def __init__(self, device: str, mode: str = "auto"):
        self.device = device
        self.mode = mode
        self.inp: ExportedBuffer | None = None
        self.out: ExportedBuffer | None = None
        self.inp_t: torch.Tensor | None = None  # flat uint8 views of the two buffers
        self.out_t: torch.Tensor | None = None
        self.token = b""
        self.active = False
        self.reason = "memfd transport selected" if mode == "memfd" else ""
        if device == "cpu":
            self.reason = "cpu device"

    # -- set-up --------------------------------------------------------------------------------
    def offer(self, case: Case) -> tuple[SharedOffer | None, list[int]]:
        """The shared buffers and their fds to add to the `load` request (None and [] when not
        offering)."""
        if self.reason or case.packed is None:
            self.reason = self.reason or "no device copy of the inputs"
            return None, []
        out_bytes = packed_size(case.expected)
        try:
            with judge_device(self.device):
                return self._offer(case, out_bytes)
        except Exception as exc:  # no device sharing here: memfds (logged once per reason)
            self._fall_back(f"{type(exc).__name__}: {str(exc)[:200]}")
            return None, []

    def _offer(self, case: Case, out_bytes: int) -> tuple[SharedOffer, list[int]]:
        try:
            self.inp = ExportedBuffer(self.device, max(case.desc["size"], TOKEN_BYTES))
            self.out = ExportedBuffer(self.device, max(out_bytes, TOKEN_BYTES))
            # every byte the worker can map starts as zero: freshly created physical memory of
            # this process's context is not guaranteed to be scrubbed (cached expected outputs)
            self.inp.tensor(whole=True).zero_()
            self.out.tensor(whole=True).zero_()
            self.inp_t, self.out_t = self.inp.tensor(), self.out.tensor()
            self.token = secrets.token_bytes(TOKEN_BYTES)
            token = torch.frombuffer(bytearray(self.token), dtype=torch.uint8)
            self.inp_t[:TOKEN_BYTES].copy_(token)
            torch.cuda.synchronize(self.inp.device)
            fds = [self.inp.share()]
            try:
                fds.append(self.out.share())
            except BaseException:
                os.close(fds[0])
                raise
        except BaseException:
            self.close()
            raise
        return SharedOffer(self.inp.nbytes, self.inp.size, self.out.nbytes, self.out.size), fds

    def accept(self, got: dict[str, str] | None) -> None:
        """After `load`, with the parsed reply's shared-buffer answer (replies.py): use the
        shared buffers only if the worker echoed the token through them."""
        if self.inp is None or self.out is None:
            return
        if not isinstance(got, dict) or got.get("error"):
            err = got.get("error") if isinstance(got, dict) else None
            # the worker's words go to the log only, trimmed: the reason is a fixed key
            self._fall_back("the worker could not map the shared buffers", str(err or "no answer"))
            return
        with judge_device(self.device):
            echoed = bytes(self.out_t[:TOKEN_BYTES].cpu().tolist())
        if got.get("token") != self.token.hex() or echoed != self.token:
            self._fall_back("the shared buffers' token did not round-trip")
            return
        self.active = True

    def _fall_back(self, why: str, detail: str = "") -> None:
        self.reason = why
        self.active = False
        self.close()
        with _WARN_LOCK:
            if why not in _WARNED:
                _WARNED.add(why)
                log.warning(
                    "device transport unavailable (%s%s): using host memfds",
                    why,
                    f": {detail[:300]}" if detail else "",
                )

    # -- per request ----------------------------------------------------------------------------
    def send(self, case: Case) -> tuple[Carry, list[int]]:
        """How `case`'s inputs travel with a request, and the fds that carry them."""
        # shared_out: the worker may write its outputs into the shared buffer (only once accepted)
        out = self.active
        if self.active and case.packed is not None and case.desc["size"] <= self.inp.nbytes:
            size = case.desc["size"]
            with judge_device(self.device):
                if size:
                    self.inp_t[:size].copy_(case.packed)
                torch.cuda.synchronize(self.inp.device)  # complete before the worker reads it
            return Carry(case.desc, shared=True, shared_out=out), []
        return Carry(case.desc, shared_out=out), [os.dup(case.fd)]

    def outputs(self, desc: dict[str, Any], fds: list[int]) -> Any:
        """The worker's outputs (`desc`: their descriptor, as the worker sent it) as private
        tensors on the judge's device. Closes `fds`."""
        desc = desc or {}
        try:
            if isinstance(desc, dict) and desc.get("shared"):
                if not self.active:
                    raise ProtocolError("outputs in a shared buffer that was never offered")
                if fds:
                    raise ProtocolError("outputs in the shared buffer came with descriptors")
                with judge_device(self.device):
                    value = unpack_buffer(desc, self.out_t, copy=True)
                    # copied out before the worker writes again
                    torch.cuda.synchronize(self.out.device)
                return value
            if len(fds) != 1:
                raise ProtocolError(f"expected one output buffer, got {len(fds)}")
            with judge_device(self.device):
                return unpack(desc, fds[0], device=self.device)
        finally:
            for fd in fds:
                os.close(fd)

    def mutated(self, case: Case, shared: bool) -> list[int]:
        """Top-level inputs whose bytes in the shared buffer differ from the judge's copy."""
        if not (shared and self.active and case.packed is not None):
            return []
        with judge_device(self.device):
            return self._changed(case, self.inp_t)

    @staticmethod
    def _changed(case: Case, buf: torch.Tensor) -> list[int]:
        changed = []
        tree = case.desc.get("tree") or {}
        for k, node in enumerate(tree.get("v") or []):
            for i in _tensor_ids(node):
                meta = case.desc["tensors"][i]
                lo, hi = meta["offset"], meta["offset"] + meta["nbytes"]
                if hi > lo and not torch.equal(buf[lo:hi], case.packed[lo:hi]):
                    changed.append(k)
                    break
        return changed

    def close(self) -> None:
        """Release the shared buffers (after the worker is gone; idempotent)."""
        self.inp_t = self.out_t = None  # the views go before the mappings
        for buf in (self.inp, self.out):
            if buf is not None:
                close_shared(self.device, buf)
        self.inp = self.out = self.inp_t = self.out_t = None
        self.active = False


def _tensor_ids(node: Any) -> list[int]:
    if not isinstance(node, dict):
        return []
    if node.get("t") == "tensor":
        return [node["i"]]
    out: list[int] = []
    children = node.get("v") if node.get("t") in ("list", "tuple") else None
    for child in children or []:
        out.extend(_tensor_ids(child))
    return out


@dataclass
class Parcel:
    """What travels with one request to the device's timing process: message fields, file
    descriptors (closed by the request once sent) and shared buffers (released by `release`
    once the process has answered: it has mapped them, or failed to)."""

    msg: dict[str, Any] = field(default_factory=dict)
    fds: list[int] = field(default_factory=list)
    buffers: list[ExportedBuffer] = field(default_factory=list)

    def add(self, other: Parcel) -> Parcel:
        self.msg.update(other.msg)
        self.fds += other.fds
        self.buffers += other.buffers
        return self

    def release(self, device: str) -> None:
        for buf in self.buffers:
            close_shared(device, buf)
        self.buffers.clear()

    def discard(self, device: str) -> None:
        """Never sent: its descriptors are closed here too."""
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()
        self.release(device)


def shared_parcel(
    device: str, buf: ExportedBuffer, fields: Callable[[dict[str, int]], dict[str, Any]]
) -> Parcel:
    """A Parcel sending `buf` to the timing process: a descriptor of it, and the message fields
    `fields` makes of its size ({"nbytes", "size"}); `buf` is released if that fails."""
    try:
        return Parcel(fields({"nbytes": buf.nbytes, "size": buf.size}), [buf.share()], [buf])
    except BaseException:
        close_shared(device, buf)
        raise


def export_inputs(device: str, case: Case) -> ExportedBuffer:
    """A new shared device buffer holding `case`'s packed inputs (one device-to-device copy,
    complete on return), for the device's trusted timing process. The caller closes it with
    `close_shared` once the process has mapped it; the memory lives on in that mapping."""
    packed = case.packed
    assert packed is not None
    size = case.desc["size"]
    return _export(device, size, lambda dest: dest.copy_(packed))


def export_tensors(device: str, tensors: list[torch.Tensor]) -> tuple[ExportedBuffer, dict]:
    """A new shared device buffer holding `tensors` packed (protocol.py's layout) and its
    descriptor; closed by the caller like `export_inputs`'s."""
    desc: dict[str, Any] = {}

    def fill(dest: torch.Tensor) -> None:
        got = pack_into(tensors, dest)
        assert got is not None  # sized by packed_size
        desc.update(got)

    return _export(device, packed_size(tensors), fill), desc


def _export(device: str, size: int, fill: Any) -> ExportedBuffer:
    """A shared buffer of `size` bytes on `device`, `fill`ed (the granule's tail zeroed: nothing
    of the judge's beyond what it holds), every copy complete on return."""
    with judge_device(device):
        buf = ExportedBuffer(device, size)
        try:
            whole = buf.tensor(whole=True)
            whole[size:].zero_()
            fill(whole[:size])
            torch.cuda.synchronize(buf.device)
        except BaseException:
            close_shared(device, buf)  # after the queued copies (the mapping then goes)
            raise
    return buf


def close_shared(device: str, buf: ExportedBuffer) -> None:
    """Release the judge's side of a shared buffer (its pending copies complete first)."""
    try:
        with judge_device(device):
            torch.cuda.synchronize(buf.device)
            buf.close()
    except (DevShareError, RuntimeError) as exc:
        log.warning("releasing a shared buffer failed: %s", exc)
