"""Timing statistics: per-callable summaries, the speedup's bootstrap interval, plausibility bounds.

Covers: `stats` (median, mean, std, min, max over trials), `bootstrap_ratio_ci` (the 95%
percentile-bootstrap interval of median(numerator) / median(denominator), resampling each side's
trials, deterministic for given data), `device_peaks` and `roofline_ms` (a lower bound on
runtime from the peaks of the device in use, tritonforge.hardware.DEVICE_PEAKS).
Does not cover: taking the times (sandbox/timing_loop.py, in the candidate's worker and in the
device's timing process) or the schedule (gpu_timing.py).
On the CPU interpreter nothing is timed by default: interpreted Triton says nothing about GPU speed.
"""

from __future__ import annotations

import functools
import hashlib
import statistics

import numpy as np
import torch

from tritonforge.hardware import DevicePeaks, peaks_for
from tritonforge.types import Timing


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


def bootstrap_ratio_ci(
    numerator: list[float], denominator: list[float], samples: int = 2000, level: float = 0.95
) -> list[float] | None:
    """[low, high] of median(numerator) / median(denominator) by the percentile bootstrap (each
    side resampled with replacement on its own). None without at least 2 positive trials each."""
    num = np.asarray([x for x in numerator if x > 0], dtype=np.float64)
    den = np.asarray([x for x in denominator if x > 0], dtype=np.float64)
    if num.size < 2 or den.size < 2:
        return None
    seed = int(hashlib.sha256(num.tobytes() + den.tobytes()).hexdigest()[:12], 16)
    rng = np.random.default_rng(seed)
    n_med = np.median(num[rng.integers(0, num.size, (samples, num.size))], axis=1)
    d_med = np.median(den[rng.integers(0, den.size, (samples, den.size))], axis=1)
    ratios = n_med / d_med
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return [float(f"{low:.4g}"), float(f"{high:.4g}")]


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
