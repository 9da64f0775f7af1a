"""State the evaluation service keeps beside its queue: devices, the verdict cache, probes.

Covers: `DeviceState` (workers, busy, faults, quarantine), `VerdictCache` (content-addressed
LRU), `discover_devices` (which devices a ServerConfig means, and the device type that goes into
cache keys) and `probe_problem` (the known-good built-in used to probe a suspect device).
Does not cover: scheduling or deciding quarantine (service.py).
"""

from __future__ import annotations

import hashlib
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

from tritonforge.config import ConfigError
from tritonforge.config.server import ServerConfig
from tritonforge.types import Problem, Verdict


@dataclass
class DeviceState:
    name: str  # "cpu" or "cuda:N" (what the judge calls it)
    kind: str  # "cpu" | "cuda"
    index: int
    workers: int
    busy: int = 0
    evaluated: int = 0
    faults: Counter = field(default_factory=Counter)
    judge_faults: int = 0  # the judge's own failures, apart from candidate statuses
    consecutive_errors: int = 0
    quarantined: bool = False
    reason: str = ""
    probing: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.name,
            "workers": self.workers,
            "busy": self.busy,
            "evaluated": self.evaluated,
            "faults": dict(self.faults),
            "judge_faults": self.judge_faults,
            "consecutive_judge_errors": self.consecutive_errors,
            "quarantined": self.quarantined,
            "quarantine_reason": self.reason,
            "probing": self.probing,
        }


class VerdictCache:
    """LRU of verdicts keyed by content hash; touched only from the event loop."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._data: OrderedDict[str, Verdict] = OrderedDict()

    def get(self, key: str) -> Verdict | None:
        v = self._data.get(key)
        if v is not None:
            self._data.move_to_end(key)
        return v

    def put(self, key: str, verdict: Verdict) -> None:
        if self.capacity <= 0:
            return
        self._data[key] = verdict
        self._data.move_to_end(key)
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def discover_devices(cfg: ServerConfig) -> tuple[list[DeviceState], str]:
    """Devices this server evaluates on, and the device type that goes into cache keys."""
    import torch

    kind = cfg.device
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cpu":
        return [DeviceState("cpu", "cpu", 0, cfg.workers)], "cpu"
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ConfigError("device 'cuda' was requested but torch sees no CUDA device")
    indices = cfg.gpus if cfg.gpus is not None else list(range(count))
    bad = [i for i in indices if not 0 <= i < count]
    if bad or not indices:
        raise ConfigError(f"gpus {indices} invalid: {count} CUDA device(s) visible")
    devices = [DeviceState(f"cuda:{i}", "cuda", i, cfg.workers) for i in indices]
    return devices, f"cuda:{torch.cuda.get_device_name(indices[0])}"


def probe_problem(kind: str) -> Problem:
    """A known-good built-in problem (relu) with its solution, at the device's size preset."""
    from tritonforge.problems import load_suite

    problems = load_suite("builtin", size="cpu" if kind == "cpu" else "gpu")
    return next(p for p in problems if p.name == "relu")
