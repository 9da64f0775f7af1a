"""What accelerator this machine offers, seen without importing torch; peak figures per device.

Covers: the GPU device nodes a sandboxed worker needs (NVIDIA `/dev/nvidia*`; AMD ROCm
`/dev/kfd` and `/dev/dri/card*`, `/dev/dri/renderD*`), the vendor they imply, the visible-device
variables (`CUDA_VISIBLE_DEVICES`, `HIP_VISIBLE_DEVICES`, `ROCR_VISIBLE_DEVICES`), `gpu_presence`
(can a GPU be asked for at all, and if not why: checked by command plans before any work), and
the roofline table (`DEVICE_PEAKS`, `peaks_for`: bandwidth and dense bf16 FLOP/s by device name).
Does not cover: opening a device or counting GPUs exactly (torch does that in the evaluator).

ROCm status: the AMD paths (device nodes, HIP/ROCR/HSA variables, MI300X/MI250X peaks) follow
the ROCm documentation and are unit-tested with simulated device nodes only; no AMD GPU has
run this code.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEVICE_PEAKS",
    "DevicePeaks",
    "GpuPresence",
    "gpu_device_nodes",
    "gpu_presence",
    "gpu_vendor",
    "peaks_for",
    "visible_list",
]

NVIDIA_PATTERNS = ("nvidia*", "nvidia-caps/*")
AMD_PATTERNS = ("kfd", "dri/card*", "dri/renderD*")
# Variables that narrow the visible GPUs; a set-but-empty one (or "-1") hides every GPU.
VISIBILITY_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def _nodes(root: Path, patterns: tuple[str, ...]) -> list[str]:
    found: list[str] = []
    for pattern in patterns:
        found.extend(sorted(glob.glob(str(root / pattern))))
    return found


def gpu_device_nodes(root: str | Path = "/dev") -> list[str]:
    """Paths of GPU device nodes under `root` (NVIDIA first, then AMD); [] on a CPU machine.

    `/dev/dri/*` alone (an integrated display GPU) does not count as an AMD compute GPU: the
    AMD nodes are listed only when `/dev/kfd` (the ROCm compute interface) exists."""
    base = Path(root)
    nvidia = _nodes(base, NVIDIA_PATTERNS)
    amd = _nodes(base, AMD_PATTERNS) if (base / "kfd").exists() else []
    return nvidia + amd


def gpu_vendor(root: str | Path = "/dev") -> str | None:
    """ "nvidia", "amd" or None, from the device nodes (NVIDIA wins if both exist)."""
    base = Path(root)
    if (base / "nvidiactl").exists() or _nodes(base, ("nvidia[0-9]*",)):
        return "nvidia"
    if (base / "kfd").exists():
        return "amd"
    return None


def visible_list(env: Mapping[str, str], name: str) -> list[str] | None:
    """The entries of visibility variable `name`; None when it is not set."""
    if name not in env:
        return None
    raw = env[name].strip()
    if raw in ("", "-1"):
        return []
    return [v.strip() for v in raw.split(",") if v.strip()]


@dataclass(frozen=True)
class GpuPresence:
    """Whether this process could use a GPU, and a sentence saying why not."""

    available: bool
    vendor: str | None
    reason: str


def gpu_presence(root: str | Path = "/dev", env: Mapping[str, str] | None = None) -> GpuPresence:
    """Device nodes present and not hidden by a visibility variable. Torch-free and instant; a
    True here can still fail later (driver mismatch), a False is final for this process."""
    env = os.environ if env is None else env
    vendor = gpu_vendor(root)
    if vendor is None:
        return GpuPresence(False, None, f"no GPU device nodes in {root} (this machine has no GPU)")
    for name in VISIBILITY_VARS:
        if visible_list(env, name) == []:
            return GpuPresence(False, vendor, f"{name}={env[name]!r} hides every GPU")
    return GpuPresence(True, vendor, f"{vendor} device nodes in {root}")


@dataclass(frozen=True)
class DevicePeaks:
    """Datasheet peaks of one device: memory bandwidth (bytes/s) and dense bf16 FLOP/s."""

    name: str
    bandwidth: float
    bf16_flops: float


# Matched by substring of the device name torch reports (lower case), first match wins.
DEVICE_PEAKS: tuple[tuple[str, DevicePeaks], ...] = (
    ("h200", DevicePeaks("NVIDIA H200", 4.8e12, 990e12)),
    ("h100", DevicePeaks("NVIDIA H100 SXM", 3.35e12, 990e12)),
    ("a100", DevicePeaks("NVIDIA A100 80GB", 2.0e12, 312e12)),
    ("l40s", DevicePeaks("NVIDIA L40S", 0.864e12, 362e12)),
    ("mi300x", DevicePeaks("AMD Instinct MI300X", 5.3e12, 1307e12)),
    ("mi250x", DevicePeaks("AMD Instinct MI250X", 3.2e12, 383e12)),
)
# Unknown devices are bounded by the fastest entry: a bound that is too low never rejects a
# real kernel (the roofline check only flags runtimes *below* it).
FASTEST = DevicePeaks("fastest known device", 5.3e12, 1307e12)


def peaks_for(device_name: str | None) -> DevicePeaks:
    """Peaks of the device whose name contains a table key; FASTEST when none matches."""
    text = (device_name or "").lower().replace(" ", "")
    for key, peaks in DEVICE_PEAKS:
        if key in text:
            return peaks
    return FASTEST
