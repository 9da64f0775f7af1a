"""Timing: statistics, the judge-side timing of the reference, and plausibility bounds.

Covers: `stats` (median, mean, std, min, max over trials after dropping the first), timing the
reference (eager, and torch.compile as a second baseline) in the judge process with the same
method the worker uses for the candidate (L2 flush before each trial, host timer around the
call, device-wide synchronize so side streams count), and a roofline bound on speedup from the
peaks of the device in use (tritonforge.hardware.DEVICE_PEAKS).
Does not cover: the candidate's timing loop (sandbox/worker.py) or the interleaving schedule (gpu_timing.py).
On the CPU interpreter nothing is timed: interpreted Triton says nothing about GPU speed.
"""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any

import torch

from tritonforge.hardware import DevicePeaks, peaks_for
from tritonforge.types import Timing

L2_FLUSH_BYTES = 256 * 1024 * 1024


def stats(times_ms: list[float], drop_first: bool = True) -> Timing:
    xs = list(times_ms[1:] if drop_first and len(times_ms) > 2 else times_ms)
    return Timing(
        median_ms=statistics.median(xs),
        mean_ms=statistics.fmean(xs),
        std_ms=statistics.pstdev(xs) if len(xs) > 1 else 0.0,
        min_ms=min(xs),
        max_ms=max(xs),
        trials=len(xs),
    )


class ReferenceTimer:
    """Times a callable on one CUDA device the same way the worker times candidates."""

    def __init__(self, device: str):
        self.device = device
        self.flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)

    def _sync(self) -> None:
        torch.cuda.synchronize(self.device)

    def time(self, fn, inputs: list[Any], warmup: int, trials: int) -> list[float]:
        out = []
        with torch.no_grad():
            for _ in range(warmup):
                fn(*inputs)
            self._sync()
            for _ in range(trials):
                self.flush.zero_()
                self._sync()
                t0 = time.perf_counter_ns()
                fn(*inputs)
                self._sync()
                out.append((time.perf_counter_ns() - t0) / 1e6)
        return out


@functools.lru_cache(maxsize=16)
def device_peaks(device: str) -> DevicePeaks:
    """Peaks of GPU `device` ("cuda:N") by the name torch reports (ROCm GPUs report theirs)."""
    return peaks_for(torch.cuda.get_device_name(device))


def roofline_ms(
    flops: float | None, nbytes: float | None, peaks: DevicePeaks | None = None
) -> float | None:
    """Lower bound on runtime from a device's peak bandwidth and bf16 FLOP rate (default: the
    fastest device in the table, so an unknown device never gets a bound that is too high)."""
    peaks = peaks or peaks_for(None)
    bounds = []
    if nbytes:
        bounds.append(nbytes / peaks.bandwidth * 1e3)
    if flops:
        bounds.append(flops / peaks.bf16_flops * 1e3)
    return max(bounds) if bounds else None
