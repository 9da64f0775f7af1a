"""How busy a GPU is over time, and its memory: NVML sampled in a thread.

Covers: `Nvml` (the NVML calls needed: through `pynvml` when it imports, else libnvidia-ml.so.1
by ctypes, which every NVIDIA driver installs), `DeviceMonitor` (a thread sampling the device's
utilisation and memory used every `period_s`; `window(t0, t1)` gives the mean busy fraction and
the peak memory of the samples taken in that window) and `open_monitor(device)`, which returns a
monitor or the reason there is none (a CPU run, no NVML, an NVML error).
NVML's utilisation is the share of its own sample period (between 1/6 s and 1 s, by GPU) in
which a kernel ran on the device, whatever process ran it (the judge's workers and timing
process count too); polled more often than that, consecutive samples overlap, so the mean over
a window is a smoothed busy fraction, good to a sample period at each end.
Does not cover: profiler traces (benchmarks/train_trace.py), splitting wall time (accounting).
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from tritonforge.logging_setup import get_logger

__all__ = ["DeviceMonitor", "Nvml", "Sample", "open_monitor"]

log = get_logger(__name__)


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class Nvml:
    """One device's utilisation (percent) and memory used (bytes) from NVML."""

    def __init__(self, index: int, bus_id: str | None = None) -> None:
        try:
            import pynvml  # type: ignore[import-not-found]
        except ImportError:
            pynvml = None
        self.via = "pynvml" if pynvml is not None else "ctypes"
        if pynvml is not None:
            pynvml.nvmlInit()
            self._py = pynvml
            self._handle = (
                pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
                if bus_id
                else pynvml.nvmlDeviceGetHandleByIndex(index)
            )
            return
        self._py = None
        self._lib = ctypes.CDLL("libnvidia-ml.so.1")  # OSError where no driver is installed
        self._check(self._lib.nvmlInit_v2(), "nvmlInit")
        self._handle = ctypes.c_void_p()
        if bus_id:
            got = self._lib.nvmlDeviceGetHandleByPciBusId_v2(
                bus_id.encode(), ctypes.byref(self._handle)
            )
        else:
            got = self._lib.nvmlDeviceGetHandleByIndex_v2(
                ctypes.c_uint(index), ctypes.byref(self._handle)
            )
        self._check(got, "nvmlDeviceGetHandle")

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code != 0:
            raise OSError(f"{what} returned NVML error {code}")

    def read(self) -> tuple[float, int]:
        """(utilisation percent over NVML's last sample period, device memory used in bytes)."""
        if self._py is not None:
            util = self._py.nvmlDeviceGetUtilizationRates(self._handle)
            mem = self._py.nvmlDeviceGetMemoryInfo(self._handle)
            return float(util.gpu), int(mem.used)
        u, m = _Utilization(), _Memory()
        self._check(self._lib.nvmlDeviceGetUtilizationRates(self._handle, ctypes.byref(u)), "util")
        self._check(self._lib.nvmlDeviceGetMemoryInfo(self._handle, ctypes.byref(m)), "memory")
        return float(u.gpu), int(m.used)


@dataclass(frozen=True)
class Sample:
    t: float  # time.monotonic()
    busy: float  # 0..1
    used_bytes: int


class DeviceMonitor:
    """Samples `read()` (-> (percent, bytes)) every `period_s` in a daemon thread."""

    def __init__(self, read: Any, period_s: float = 0.1, via: str = "") -> None:
        self._read, self.period_s, self.via = read, period_s, via
        self._samples: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def start(self) -> DeviceMonitor:
        self._thread = threading.Thread(target=self._run, name="device-monitor", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                percent, used = self._read()
            except Exception as exc:  # a sampler error ends sampling; windows say so
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning("device monitor stopped: %s", self.error)
                return
            self.add(Sample(time.monotonic(), percent / 100.0, used))
            self._stop.wait(self.period_s)

    def add(self, sample: Sample) -> None:
        with self._lock:
            self._samples.append(sample)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def window(self, t0: float, t1: float) -> dict[str, float | None]:
        """Mean busy fraction and peak device memory (GiB) of the samples in [t0, t1]; None
        where no sample fell in it. Samples older than t0 are dropped (windows go forward)."""
        with self._lock:
            self._samples = [s for s in self._samples if s.t >= t0]
            inside = [s for s in self._samples if s.t <= t1]
        if not inside:
            return {"gpu_busy": None, "device_mem_peak_gib": None}
        return {
            "gpu_busy": sum(s.busy for s in inside) / len(inside),
            "device_mem_peak_gib": max(s.used_bytes for s in inside) / 2**30,
        }


def _nvml_address(cuda_index: int) -> tuple[int, str | None]:
    """(NVML index, PCI bus id or None) of torch's CUDA device `cuda_index` (the index read
    through CUDA_VISIBLE_DEVICES where it lists numbers)."""
    import torch

    props = torch.cuda.get_device_properties(cuda_index)
    bus = None
    if all(hasattr(props, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        bus = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    if cuda_index < len(visible) and visible[cuda_index].isdigit():
        return int(visible[cuda_index]), bus
    return cuda_index, bus


def open_monitor(device: str, period_s: float = 0.1) -> tuple[DeviceMonitor | None, str]:
    """(a started monitor of `device`, how it reads) or (None, why there is none)."""
    if not device.startswith("cuda"):
        return None, f"no GPU in this run (device {device})"
    try:
        index, bus = _nvml_address(int(device.partition(":")[2] or 0))
        try:
            nvml = Nvml(index, bus)
        except Exception:  # a bus id NVML does not take: the index
            nvml = Nvml(index, None)
        nvml.read()
    except Exception as exc:  # no driver library, no permission, an NVML error: a reason
        return None, f"NVML unavailable: {type(exc).__name__}: {exc}"
    return DeviceMonitor(nvml.read, period_s, nvml.via).start(), f"NVML via {nvml.via}"
