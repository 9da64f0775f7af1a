"""The policy's work on the judge's device: shared access to the device's timing gate.

Covers: `DeviceShare`, whose `hold()` the in-process engine takes around each decode step and
weight copy, and the RL driver around each train step, when the judge runs in this process on
the same GPU. The hold is shared access of the evaluator's gate of that device (the gate the
judge's own device work and each candidate request hold; a timing holds it exclusively), so no
generation or training runs on the device while a candidate and its reference are timed, and
they wait only there. On leaving a hold the device is synchronized: the gate is released when
the queued work is done, not when it was launched. `share_for(...)` decides from the config.
With the judge elsewhere (the HTTP service) or on another device the hold is a no-op, and
timing on a GPU that generation or training also uses sees their work (a warning says so).
Does not cover: the gate itself (evaluation.judge.device_gate) or what runs inside a hold.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tritonforge.config.run import TrainRunConfig
from tritonforge.logging_setup import get_logger

__all__ = ["DeviceShare", "share_for"]

log = get_logger(__name__)


class DeviceShare:
    """Shared access to `device`'s timing gate for the policy's work (no-op for None)."""

    def __init__(self, device: str | None) -> None:
        self.device = device
        self._lock = threading.Lock()
        self.waited_s = 0.0  # time holds waited for a timing to end, in all
        self.holds = 0

    @contextmanager
    def hold(self) -> Iterator[float]:
        """Hold shared access while the block runs; yields the seconds waited for it."""
        if self.device is None:
            yield 0.0
            return
        from tritonforge.evaluation.judge.device_gate import gate

        with gate(self.device).shared() as waited:
            with self._lock:
                self.waited_s += waited
                self.holds += 1
            try:
                yield waited
            finally:
                _synchronize(self.device)


def _synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda") and torch.cuda.is_initialized():
        torch.cuda.synchronize(torch.device(device))


def _index(device: str) -> int:
    """The CUDA index of a torch device string ("cuda" is the current device, 0 here)."""
    _, _, index = device.partition(":")
    return int(index) if index else 0


def share_for(cfg: TrainRunConfig, trainer_device: str) -> DeviceShare:
    """The share of a run: the gate of the judge's GPU when the judge runs in this process and
    the engine (hf) or the trainer (`trainer_device`) use that GPU; else a no-op share."""
    settings = cfg.eval.settings
    if settings.device == "cpu" or not (
        trainer_device.startswith("cuda") or cfg.engine.device.startswith("cuda")
    ):
        return DeviceShare(None)
    judged = f"cuda:{settings.device_index}"
    users = [trainer_device] + ([cfg.engine.device] if cfg.engine.type == "hf" else [])
    same = any(d.startswith("cuda") and _index(d) == settings.device_index for d in users)
    if not same:
        return DeviceShare(None)
    if cfg.eval.type != "local":
        log.warning(
            "the judge runs in another process (eval.type=%s): timings on %s are not kept "
            "apart from this run's generation and training",
            cfg.eval.type,
            judged,
        )
        return DeviceShare(None)
    return DeviceShare(judged)
