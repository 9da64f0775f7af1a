"""Device memory shared between the judge and a sandboxed worker, by file descriptor.

Covers: CUDA virtual-memory-management (VMM) allocations made exportable as POSIX file
descriptors (`cuMemCreate` + `cuMemExportToShareableHandle`), mapped in the judge, and imported
and mapped by the worker from the descriptor it received over the socket (SCM_RIGHTS, like the
memfds). Both sides see the memory as a flat uint8 CUDA tensor. A descriptor is a plain fd, so it
crosses PID namespaces and user changes, which the legacy CUDA IPC handles torch uses do not.

Does not cover: what is stored in the buffers (protocol.py lays values out, judge/evaluator.py decides when
to use them) or fallback (callers use memfds when `DevShareError` is raised).

Lifetime: the physical memory lives until every mapping and every exported fd is gone; the judge
closes its side only after the worker that imported it has been killed.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

import torch

# CUDA driver API constants (cuda.h)
_ATTR_VMM_SUPPORTED = 102  # CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
_ATTR_POSIX_FD_SUPPORTED = 103  # CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
_ALLOC_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
_HANDLE_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_LOCATION_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
_ACCESS_RW = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
_GRANULARITY_MINIMUM = 0
TOKEN_BYTES = (
    8  # the judge's random token, echoed by the worker from the input to the output buffer
)


class DevShareError(RuntimeError):
    """Device sharing is unavailable here, or one driver call failed (callers fall back)."""


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _AllocProp(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_u64 = ctypes.c_ulonglong
_LOCK = threading.Lock()
_DRIVER: Any = None


def _driver() -> Any:
    """libcuda, loaded once and initialised (raises DevShareError where there is none)."""
    global _DRIVER
    with _LOCK:
        if _DRIVER is None:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
            except OSError as exc:
                raise DevShareError(f"no CUDA driver library: {exc}") from None
            _check(lib, lib.cuInit(0), "cuInit")
            _DRIVER = lib
    return _DRIVER


def _check(lib: Any, rc: int, what: str) -> None:
    if rc != 0:
        name = ctypes.c_char_p()
        lib.cuGetErrorName(rc, ctypes.byref(name))
        label = name.value.decode() if name.value else f"error {rc}"
        raise DevShareError(f"{what} failed: {label}")


class _Context:
    """The device's primary context (the one torch uses) made current for a few driver calls."""

    def __init__(self, index: int):
        self.lib = _driver()
        self.dev = ctypes.c_int()
        _check(self.lib, self.lib.cuDeviceGet(ctypes.byref(self.dev), index), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        _check(
            self.lib,
            self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), self.dev),
            "cuDevicePrimaryCtxRetain",
        )

    def __enter__(self) -> Any:
        _check(self.lib, self.lib.cuCtxPushCurrent_v2(self.ctx), "cuCtxPushCurrent")
        return self.lib

    def __exit__(self, *exc) -> None:
        popped = ctypes.c_void_p()
        self.lib.cuCtxPopCurrent_v2(ctypes.byref(popped))

    def attribute(self, attr: int) -> int:
        value = ctypes.c_int()
        _check(
            self.lib,
            self.lib.cuDeviceGetAttribute(ctypes.byref(value), attr, self.dev),
            "cuDeviceGetAttribute",
        )
        return value.value

    def release(self) -> None:
        self.lib.cuDevicePrimaryCtxRelease_v2(self.dev)


def _prop(dev: int) -> _AllocProp:
    prop = _AllocProp()
    prop.type = _ALLOC_PINNED
    prop.requestedHandleTypes = _HANDLE_POSIX_FD
    prop.location = _Location(_LOCATION_DEVICE, dev)
    return prop


def _index(device: str | torch.device) -> int:
    d = torch.device(device)
    if d.type != "cuda":
        raise DevShareError(f"device sharing needs a CUDA device, not {d}")
    return d.index if d.index is not None else 0


class _CudaArray:
    """The minimal `__cuda_array_interface__` torch.as_tensor needs to view mapped memory.
    The tensor keeps this object (and through it the mapping's owner) alive."""

    def __init__(self, ptr: int, nbytes: int, owner: Any):
        self.owner = owner
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 3,
            "strides": None,
            "stream": None,
        }


class _Mapping:
    """A physical allocation mapped read-write into this process's device address space."""

    def __init__(self, device: str | torch.device, nbytes: int):
        self.ctx: _Context | None = None
        self.handle = _u64(0)
        self.ptr = _u64(0)
        self.size = 0
        self.mapped = False
        self.closed = False
        if nbytes <= 0:
            raise DevShareError("a shared buffer needs a positive size")
        self.index = _index(device)
        self.device = torch.device("cuda", self.index)
        self.nbytes = nbytes
        self.ctx = _Context(self.index)
        with self.ctx as lib:
            gran = ctypes.c_size_t()
            prop = _prop(self.ctx.dev.value)
            _check(
                lib,
                lib.cuMemGetAllocationGranularity(
                    ctypes.byref(gran), ctypes.byref(prop), _GRANULARITY_MINIMUM
                ),
                "cuMemGetAllocationGranularity",
            )
            g = max(int(gran.value), 1)
            self.size = (nbytes + g - 1) // g * g
            self.granularity = g

    def _map(self, lib: Any) -> None:
        _check(
            lib,
            lib.cuMemAddressReserve(
                ctypes.byref(self.ptr),
                ctypes.c_size_t(self.size),
                ctypes.c_size_t(0),
                _u64(0),
                _u64(0),
            ),
            "cuMemAddressReserve",
        )
        _check(
            lib,
            lib.cuMemMap(
                self.ptr, ctypes.c_size_t(self.size), ctypes.c_size_t(0), self.handle, _u64(0)
            ),
            "cuMemMap",
        )
        self.mapped = True
        access = _AccessDesc(_Location(_LOCATION_DEVICE, self.ctx.dev.value), _ACCESS_RW)
        _check(
            lib,
            lib.cuMemSetAccess(
                self.ptr, ctypes.c_size_t(self.size), ctypes.byref(access), ctypes.c_size_t(1)
            ),
            "cuMemSetAccess",
        )

    def tensor(self, whole: bool = False) -> torch.Tensor:
        """The buffer's `nbytes` (with `whole`: every mapped byte, granule-rounded) as a flat
        uint8 tensor on its device (no copy)."""
        if self.closed:
            raise DevShareError("the shared buffer is closed")
        n = self.size if whole else self.nbytes
        t = torch.as_tensor(_CudaArray(self.ptr.value, n, self), device=self.device)
        if t.data_ptr() != self.ptr.value or t.numel() != n:
            raise DevShareError("torch did not view the mapped memory in place")
        return t

    def close(self) -> None:
        """Unmap and release (idempotent), after the device's pending work: unmapping is not
        ordered with queued kernels, and a view's last reference can go while a copy from it is
        queued (an imported buffer released by the garbage collector: a strided input copied out
        of the timing process's mapping ended its context with an illegal memory access)."""
        if self.closed or self.ctx is None:
            self.closed = True
            return
        self.closed = True
        with self.ctx as lib:
            if self.mapped:
                lib.cuCtxSynchronize()  # (an error here is the context's, reported elsewhere)
                lib.cuMemUnmap(self.ptr, ctypes.c_size_t(self.size))
            if self.ptr.value:
                lib.cuMemAddressFree(self.ptr, ctypes.c_size_t(self.size))
            if self.handle.value:
                lib.cuMemRelease(self.handle)
        self.ctx.release()


class ExportedBuffer(_Mapping):
    """Judge side: device memory this process allocates and offers to a worker by fd."""

    def __init__(self, device: str | torch.device, nbytes: int):
        self.fd = -1
        try:
            super().__init__(device, nbytes)
            with self.ctx as lib:
                if not self.ctx.attribute(_ATTR_VMM_SUPPORTED):
                    raise DevShareError("the device does not support virtual memory management")
                if not self.ctx.attribute(_ATTR_POSIX_FD_SUPPORTED):
                    raise DevShareError("the device cannot export memory as file descriptors")
                prop = _prop(self.ctx.dev.value)
                _check(
                    lib,
                    lib.cuMemCreate(
                        ctypes.byref(self.handle),
                        ctypes.c_size_t(self.size),
                        ctypes.byref(prop),
                        _u64(0),
                    ),
                    "cuMemCreate",
                )
                fd = ctypes.c_int(-1)
                _check(
                    lib,
                    lib.cuMemExportToShareableHandle(
                        ctypes.byref(fd), self.handle, _HANDLE_POSIX_FD, _u64(0)
                    ),
                    "cuMemExportToShareableHandle",
                )
                self.fd = fd.value
                self._map(lib)
        except BaseException:
            self.close()
            raise

    def share(self) -> int:
        """A new descriptor of the allocation, for one send (the caller closes it)."""
        if self.closed:
            raise DevShareError("the shared buffer is closed")
        return os.dup(self.fd)

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)
        super().close()


class ImportedBuffer(_Mapping):
    """Worker side: maps the allocation behind a descriptor the judge sent. The descriptor is
    closed here whatever happens."""

    def __init__(self, fd: int, device: str | torch.device, nbytes: int, size: int | None = None):
        try:
            super().__init__(device, nbytes)
            if size is not None:  # the exporter's mapped size (whole granules, at least nbytes)
                if size < nbytes or size % self.granularity:
                    raise DevShareError(f"bad shared buffer size {size} for {nbytes} bytes")
                self.size = size
            with self.ctx as lib:
                _check(
                    lib,
                    lib.cuMemImportFromShareableHandle(
                        ctypes.byref(self.handle), ctypes.c_void_p(fd), _HANDLE_POSIX_FD
                    ),
                    "cuMemImportFromShareableHandle",
                )
                self._map(lib)
        except BaseException:
            self.close()
            raise
        finally:
            os.close(fd)

    def __del__(self) -> None:
        # no view is left (each tensor keeps its mapping's owner alive): unmap and release
        try:
            self.close()
        except Exception:  # interpreter shutdown, or a driver already gone
            pass
