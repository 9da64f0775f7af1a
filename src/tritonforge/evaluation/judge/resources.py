"""What the judge keeps per device: fork server, gate, memory budget and timing process.

Covers: `DeviceResources` (one per device an Evaluator uses, made on first use; `admitted`
reserves one evaluation's bytes): the fork server
that forks its workers, the device's gate (device_gate.py), its trusted timing process
(ref_timer.py) and its memory budget (admission.py), wired to what is resident on the device:
the reference models and cases the judge keeps (reference.py), the timing process and its loaded
references, and memory the judge's caching allocator holds unused (returned by `trim`). The
budget is read from the Evaluator's settings: `device_memory_gib`, else `device_memory_fraction`
of the device's memory (the CPU has none unless `device_memory_gib` is set). On a GPU the gate
and the budget have their cross-process layers (host_gate.py, host_ledger.py) in the runtime
directory (host_share.py), shared with every other judging process of the host.
Does not cover: admission decisions per evaluation (evaluator.py), the timing schedule
(gpu_timing.py).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.admission import (
    GIB,
    DeviceBudget,
    case_build_bytes,
    evaluation_bytes,
)
from tritonforge.evaluation.judge.device_gate import DeviceGate, gate
from tritonforge.evaluation.judge.forkserver import ForkServer
from tritonforge.evaluation.judge.gpu_lock import judge_device, lock_stats
from tritonforge.evaluation.judge.host_ledger import HostLedger
from tritonforge.evaluation.judge.host_share import device_key, runtime_dir
from tritonforge.evaluation.judge.ref_timer import RefTimer
from tritonforge.evaluation.judge.reference import Reference, ReferenceStore, meta_footprint
from tritonforge.evaluation.judge.workerenv import base_env, private_scratch, worker_spec

NO_BUDGET = 1 << 62
TIMER_SHARE = 8  # the timing process keeps loaded references up to 1/8 of the budget


def capacity(settings: EvalSettings, device: str) -> int:
    """The device's byte budget for everything the judge puts on it."""
    if settings.device_memory_gib is not None:
        return int(settings.device_memory_gib * GIB)
    if device == "cpu":
        return NO_BUDGET
    total = torch.cuda.get_device_properties(torch.device(device)).total_memory
    return int(total * settings.device_memory_fraction)


class DeviceResources:
    """One device's fork server, gate, budget and timing process."""

    def __init__(self, device: str, settings: EvalSettings, refs: ReferenceStore):
        self.device, self.settings, self.refs = device, settings, refs
        self.gate: DeviceGate = gate(device)
        self.server = ForkServer(base_env(device))
        self._start = threading.Lock()
        # a worker's context and library workspaces live in device memory (none on the CPU)
        self.context_bytes = settings.worker_context_mb << 20 if device != "cpu" else 0
        cap = capacity(settings, device)
        self._scratch: str | None = None  # the timing process's, in the rlimits-only sandbox
        self.timer = RefTimer(
            device, self.ensure_server, self._timer_spec, self.context_bytes, cap // TIMER_SHARE
        )
        where = runtime_dir() if device != "cpu" else None
        ledger = HostLedger(where, device_key(device)) if where is not None else None
        self.budget = DeviceBudget(device, cap, self.resident, self.pinned, self.trim, host=ledger)

    def _timer_spec(self) -> dict[str, Any]:
        if self.settings.sandbox == "rlimits" and self._scratch is None:
            self._scratch = private_scratch()
        return worker_spec(self.settings, self.device, self._scratch)

    def ensure_server(self) -> ForkServer:
        with self._start:
            self.server.ensure()
        return self.server

    @contextmanager
    def admitted(
        self, ref: Reference, first_case: Callable[[], Any], alone: bool
    ) -> Iterator[float]:
        """Hold one evaluation's device bytes; yields the seconds waited. A problem seen for
        the first time has its first case built (`first_case`) under a reservation estimated on
        the meta device, which measures its footprint. Raises admission.DoesNotFit."""
        first_wait = 0.0
        if ref.footprint is None:
            with self.budget.reserve(case_build_bytes(meta_footprint(ref)), alone=alone) as g:
                first_wait = g.waited
                first_case()
        assert ref.footprint is not None  # measured by the first case
        try:
            need = evaluation_bytes(ref.footprint, self.context_bytes)
            with self.budget.reserve(need, alone=alone) as grant:
                grant.waited += first_wait  # both waits are the evaluation's admission wait
                yield grant
        finally:
            self.release_slack()

    # -- what is on the device besides the evaluations' reservations ----------------------------
    def _allocator_slack(self) -> int:
        """Memory the judge's caching allocator holds but does not use (invisible to workers)."""
        if not self.device.startswith("cuda") or not torch.cuda.is_initialized():
            return 0
        d = torch.device(self.device)
        return max(0, torch.cuda.memory_reserved(d) - torch.cuda.memory_allocated(d))

    def pinned(self) -> int:
        """Bytes that stay while the judge runs: its context and the timing process itself."""
        judge_context = self.context_bytes if self.device.startswith("cuda") else 0
        return judge_context + self.timer.base_bytes()

    def resident(self) -> int:
        """Everything held now outside reservations: pinned bytes, reference models and cached
        cases, the timing process's loaded references, the judge allocator's unused cache."""
        return (
            self.pinned()
            + self.refs.model_bytes(self.device)
            + self.refs.case_bytes(self.device)
            + self.timer.entry_bytes()
            + self._allocator_slack()
        )

    def case_room(self) -> float:
        """How far the judge's case cache may grow now (ReferenceStore.device_room)."""
        busy = self.budget.reserved + self.pinned() + self.timer.entry_bytes()
        return max(0, self.budget.capacity - busy - self.refs.model_bytes(self.device))

    def trim(self, target: int) -> None:
        """Give memory back until resident <= `target`: the judge's cached cases and reference
        models first, then the timing process's references, then the allocator's unused cache."""
        over = self.resident() - target
        if over > 0:
            self.refs.free_device(self.device, over)
        over = self.resident() - target
        if over > 0:
            self.timer.trim(max(0, self.timer.entry_bytes() - over))
        if self._allocator_slack() > 0 and self.resident() > target:
            with judge_device(self.device):  # not during a timing
                torch.cuda.empty_cache()

    def release_slack(self, threshold: int = GIB) -> None:
        """After an evaluation: return the judge allocator's unused cache above `threshold`."""
        if self._allocator_slack() > threshold:
            with judge_device(self.device):
                torch.cuda.empty_cache()

    def own_pids(self) -> frozenset[int]:
        """Long-lived processes of the judge under the fork server (the timing process)."""
        pid = self.timer.pid
        return frozenset() if pid is None else frozenset({pid})

    def memory(self) -> dict[str, int]:
        """Where the device's bytes are now, as the judge sees them (out-of-memory notes)."""
        out = {
            "budget": self.budget.capacity,
            "reserved_by_evaluations": self.budget.reserved,
            "pinned": self.pinned(),
            "judge_case_cache": self.refs.case_bytes(self.device),
            "judge_models": self.refs.model_bytes(self.device),
            "timer_entries": self.timer.entry_bytes(),
        }
        if self.device.startswith("cuda") and torch.cuda.is_initialized():
            d = torch.device(self.device)
            out["judge_allocated"] = torch.cuda.memory_allocated(d)
            out["judge_reserved"] = torch.cuda.memory_reserved(d)
            out["device_free"], out["device_total"] = torch.cuda.mem_get_info(d)
        return out

    def stats(self) -> dict[str, Any]:
        return {
            "capacity": self.budget.capacity,
            "reserved": self.budget.reserved,
            "peak_reserved": self.budget.peak_reserved,
            "resident": self.resident(),
            "granted": self.budget.granted,
            "backfills": self.budget.backfills,
            "timings": self.gate.exclusive_count,
            "timing_seconds": round(self.gate.exclusive_seconds, 3),
            "timer_starts": self.timer.starts,
            "timer_deaths": self.timer.deaths,
            "timer_weights": dict(self.timer.weights),  # loads given the judge's / built anew
            "judge_lock": lock_stats(self.device),
            "host_layer": self.budget.host is not None and self.gate.host is not None,
            "host_reclaimed": self.budget.host.reclaimed if self.budget.host is not None else 0,
        }

    def close(self) -> None:
        self.budget.close()
        self.timer.close()
        self.server.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
