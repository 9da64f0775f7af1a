"""Where an RL step's wall time goes, and how busy the device was meanwhile.

Covers: `Timeline` (intervals of each activity on the monotonic clock, open ones included;
thread-safe), `timed_engine` and `TimedBackend` (an Engine and an EvalBackend whose calls are
recorded; every other attribute passes through), `judge_spans` (a verdict's queue, correctness
and timing intervals, rebuilt from its phase_seconds and the call's own start and end),
`LoopAccounting` (the fields of one step's window, the run's summary) and `aggregate` (the
run's figures from its per-step rows).

A step's window runs from the end of the previous step's weight push (or the start of the
steps) to the end of its own. In it:
- generate_s: time some generation request was in the engine (queued or decoding);
- judge_s: time some evaluation was in flight; judge_queue_s, judge_correctness_s and
  judge_timing_s: time some finished evaluation was in that part (queue: before the evaluator
  started it, waiting for memory admission or for the device gate; timing: the timed rounds and
  the re-check; correctness: the rest: spawn, import, compile, trials, comparisons);
  judge_unsplit_s: judge time of evaluations still in flight at the window's end (their parts
  are known when they finish, in a later window);
- train_s, sync_s: the trainer's update and the weight push; busy_s: time any of these ran;
  idle_s = wall_s - busy_s; slowest_stage_s: the largest of generate_s, judge_s, train_s and
  sync_s; wall_over_slowest = wall_s / slowest_stage_s (1 when the stages overlap fully; their
  number when equally long stages run one after another);
- gen_tokens (and gen_tokens_per_s over generate_s), verdicts (and verdicts_per_min over
  wall_s), gpu_busy (NVML: device_monitor), device_mem_peak_gib (NVML, every process),
  gpu_mem_peak_gib (this process's allocator: engine, trainer, judge), host_rss_gib (CPU runs).
Activities overlap (async schedule): the parts may sum to more than wall_s; each is at most it.
Does not cover: the NVML sampling (device_monitor), the device gate (device_share), the loop.
"""

from __future__ import annotations

import itertools
import resource
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tritonforge.config.run import TrainRunConfig
from tritonforge.training.device_monitor import DeviceMonitor, open_monitor
from tritonforge.training.device_share import DeviceShare, share_for
from tritonforge.training.pieces import StateDictEngine
from tritonforge.types import Verdict

__all__ = [
    "STAGES",
    "LoopAccounting",
    "TimedBackend",
    "TimedEngine",
    "Timeline",
    "aggregate",
    "judge_spans",
    "open_accounting",
    "timed_engine",
]

STAGES = ("generate", "judge", "train", "sync")
JUDGE_PARTS = ("judge_queue", "judge_correctness", "judge_timing")


def _union(spans: list[tuple[float, float]], t0: float, t1: float) -> float:
    """Seconds of [t0, t1] covered by at least one of `spans`."""
    total, end = 0.0, t0
    for a, b in sorted(spans):
        a, b = max(a, end), min(b, t1)
        if b > a:
            total += b - a
            end = b
    return total


class Timeline:
    """Intervals per activity kind and counts at instants; windows read them going forward."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: dict[str, list[tuple[float, float]]] = {}
        self._open: dict[int, tuple[str, float]] = {}
        self._counts: dict[str, list[tuple[float, float]]] = {}
        self._ids = itertools.count()

    def begin(self, kind: str, t: float | None = None) -> int:
        """Open a span of `kind` starting at `t` (now); returns its token for `end`."""
        with self._lock:
            token = next(self._ids)
            self._open[token] = (kind, time.monotonic() if t is None else t)
        return token

    def end(self, token: int) -> float:
        t1 = time.monotonic()
        with self._lock:
            kind, t0 = self._open.pop(token)
            self._spans.setdefault(kind, []).append((t0, t1))
        return t1

    @contextmanager
    def span(self, kind: str) -> Iterator[None]:
        token = self.begin(kind)
        try:
            yield
        finally:
            self.end(token)

    def add(self, kind: str, t0: float, t1: float) -> None:
        if t1 > t0:
            with self._lock:
                self._spans.setdefault(kind, []).append((t0, t1))

    def count(self, kind: str, n: float, t: float | None = None) -> None:
        with self._lock:
            self._counts.setdefault(kind, []).append((time.monotonic() if t is None else t, n))

    def busy(self, kinds: tuple[str, ...], t0: float, t1: float) -> float:
        """Seconds of [t0, t1] in which an activity of `kinds` ran (open ones until now)."""
        now = time.monotonic()
        with self._lock:
            spans = [s for k in kinds for s in self._spans.get(k, [])]
            spans += [(a, now) for k, a in self._open.values() if k in kinds]
        return _union(spans, t0, t1)

    def total(self, kind: str, t0: float, t1: float) -> float:
        with self._lock:
            return sum(n for t, n in self._counts.get(kind, []) if t0 < t <= t1)

    def forget_before(self, t: float) -> None:
        """Drop finished spans and counts that end before `t` (no window reaches them)."""
        with self._lock:
            for kind, spans in self._spans.items():
                self._spans[kind] = [s for s in spans if s[1] >= t]
            for kind, counts in self._counts.items():
                self._counts[kind] = [c for c in counts if c[0] > t]


def judge_spans(v: Verdict, t0: float, t1: float) -> list[tuple[str, float, float]]:
    """The queue, correctness and timing intervals of an evaluation called at t0 that returned
    `v` at t1: the queue first (time outside the evaluator, then admission and gate waits), the
    timing last (timed rounds and re-check), correctness between. A cached verdict has none."""
    if v.cached:
        return []
    total, ph = t1 - t0, v.phase_seconds
    outside = max(0.0, total - v.wall_seconds) if v.wall_seconds > 0 else 0.0
    queue = min(total, outside + ph.get("admission_wait", 0.0) + ph.get("gate_wait", 0.0))
    timing = min(total - queue, ph.get("timing", 0.0) + ph.get("recheck", 0.0))
    return [
        ("judge_queue", t0, t0 + queue),
        ("judge_correctness", t0 + queue, t1 - timing),
        ("judge_timing", t1 - timing, t1),
    ]


class TimedEngine:
    """An Engine whose generate calls are recorded ("generate" spans, "gen_tokens" counts).
    The Engine protocol's members are defined here, not passed through: since Python 3.12 an
    isinstance check of a runtime protocol looks attributes up statically. Make one with
    `timed_engine`, which keeps an in-memory engine's `load_state_dict` (StateDictEngine)."""

    def __init__(self, inner: Any, timeline: Timeline) -> None:
        self._inner, self._timeline = inner, timeline

    def __getattr__(self, name: str) -> Any:  # model, device_hold, ...
        return getattr(self._inner, name)

    @property
    def policy_version(self) -> int:
        return self._inner.policy_version

    async def generate(self, prompts: list[list[int]], params: Any) -> list[Any]:
        with self._timeline.span("generate"):
            gens = await self._inner.generate(prompts, params)
        self._timeline.count("gen_tokens", float(sum(len(g.token_ids) for g in gens)))
        return gens

    async def update_weights(self, path: str, version: int) -> bool:
        return await self._inner.update_weights(path, version)

    async def health(self) -> bool:
        return await self._inner.health()

    async def aclose(self) -> None:
        await self._inner.aclose()


class _TimedStateDictEngine(TimedEngine):
    async def load_state_dict(self, state: Any, version: int) -> bool:
        return await self._inner.load_state_dict(state, version)


def timed_engine(inner: Any, timeline: Timeline) -> TimedEngine:
    """`inner` recorded on `timeline`; it takes in-memory weights exactly when `inner` does."""
    cls = _TimedStateDictEngine if isinstance(inner, StateDictEngine) else TimedEngine
    return cls(inner, timeline)


class TimedBackend:
    """An EvalBackend whose evaluations are recorded ("judge" spans, their parts, "verdicts")."""

    def __init__(self, inner: Any, timeline: Timeline) -> None:
        self._inner, self._timeline = inner, timeline

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def evaluate(self, problem: Any, source: str, settings: Any = None) -> Verdict:
        t0 = time.monotonic()
        token = self._timeline.begin("judge", t0)
        try:
            v = await self._inner.evaluate(problem, source, settings)
        finally:
            t1 = self._timeline.end(token)
        for kind, a, b in judge_spans(v, t0, t1):
            self._timeline.add(kind, a, b)
        self._timeline.count("verdicts", 1.0, t1)
        return v

    async def aclose(self) -> None:
        await self._inner.aclose()


class LoopAccounting:
    """The per-step split of one run (see the module docstring)."""

    def __init__(
        self,
        timeline: Timeline,
        share: DeviceShare,
        device: str,
        monitor: DeviceMonitor | None = None,
        monitor_note: str = "",
    ) -> None:
        self.timeline, self.share, self.device = timeline, share, device
        self.monitor, self.monitor_note = monitor, monitor_note
        self._mark = time.monotonic()
        self._gate_mark = 0.0

    def start(self) -> None:
        """The first step's window starts now."""
        self._mark = time.monotonic()
        self.timeline.forget_before(self._mark)
        self._reset_peaks()

    @contextmanager
    def span(self, kind: str) -> Iterator[None]:
        with self.timeline.span(kind):
            yield

    def step_fields(self) -> dict[str, float]:
        """The fields of the window from the last call (or `start`) to now; the next starts."""
        t0, t1 = self._mark, time.monotonic()
        tl, wall = self.timeline, max(t1 - t0, 1e-9)
        row = {"wall_s": wall}
        for kind in STAGES + JUDGE_PARTS:
            row[f"{kind}_s"] = tl.busy((kind,), t0, t1)
        row["judge_unsplit_s"] = row["judge_s"] - tl.busy(JUDGE_PARTS, t0, t1)
        row["busy_s"] = tl.busy(STAGES, t0, t1)
        row["idle_s"] = max(0.0, wall - row["busy_s"])
        row["slowest_stage_s"] = max(row[f"{k}_s"] for k in STAGES)
        if row["slowest_stage_s"] > 0:
            row["wall_over_slowest"] = wall / row["slowest_stage_s"]
        row["gen_tokens"] = tl.total("gen_tokens", t0, t1)
        if row["generate_s"] > 0:
            row["gen_tokens_per_s"] = row["gen_tokens"] / row["generate_s"]
        row["verdicts"] = tl.total("verdicts", t0, t1)
        row["verdicts_per_min"] = row["verdicts"] / wall * 60.0
        waited = self.share.waited_s  # generation and training waiting for timings
        row["gate_wait_s"], self._gate_mark = waited - self._gate_mark, waited
        row.update(self._memory_and_busy(t0, t1))
        self._mark = t1
        tl.forget_before(t1)
        self._reset_peaks()
        return {k: v for k, v in row.items() if v is not None}

    def _memory_and_busy(self, t0: float, t1: float) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        if self.monitor is not None:
            out.update(self.monitor.window(t0, t1))
        if self.device.startswith("cuda"):
            import torch

            out["gpu_mem_peak_gib"] = torch.cuda.max_memory_allocated(self.device) / 2**30
        else:  # the process's peak resident size since it started (KiB on Linux)
            out["host_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        return out

    def _reset_peaks(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            if torch.cuda.is_initialized():
                torch.cuda.reset_peak_memory_stats(self.device)

    def summary(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "gpu_busy_source": self.monitor_note if self.monitor is not None else None,
            "gpu_busy_reason": None if self.monitor is not None else self.monitor_note,
            "timing_gate": self.share.device,
            "gate_wait_s": round(self.share.waited_s, 3),
        }

    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()


def open_accounting(cfg: TrainRunConfig, device: str, timeline: Timeline) -> LoopAccounting:
    """The accounting of a run whose trainer is on `device`: the judge's device gate shared
    where the judge shares that GPU in this process, NVML sampling where there is a GPU."""
    monitor, note = open_monitor(device)
    return LoopAccounting(timeline, share_for(cfg, device), device, monitor, note)


def aggregate(rows: list[dict[str, Any]], skip_first: bool = True) -> dict[str, Any]:
    """The run's figures from its per-step rows: over the steps after the first (its window
    has nothing to overlap with: no earlier step trains meanwhile) when there are several,
    gpu_busy_fraction (wall-weighted mean; None without samples), step_over_slowest_stage
    (median of wall_over_slowest) and the mean of each part."""
    rows = [r for r in rows if "wall_s" in r]
    steady = rows[1:] if skip_first and len(rows) > 1 else rows
    if not steady:
        return {"steps_counted": 0}
    busy = [(r["gpu_busy"], r["wall_s"]) for r in steady if r.get("gpu_busy") is not None]
    ratios = [r["wall_over_slowest"] for r in steady if "wall_over_slowest" in r]
    parts = ["wall", *STAGES, *JUDGE_PARTS, "idle"]
    return {
        "steps_counted": len(steady),
        "first_step_counted": rows.index(steady[0]),
        "gpu_busy_fraction": (
            sum(b * w for b, w in busy) / sum(w for _, w in busy) if busy else None
        ),
        "step_over_slowest_stage": statistics.median(ratios) if ratios else None,
        "mean_s": {p: statistics.fmean(r[f"{p}_s"] for r in steady) for p in parts},
    }
