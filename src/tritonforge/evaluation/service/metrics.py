"""Prometheus metrics of the evaluation service, in a registry of their own (one per service).

Covers: counters, gauges and histograms the scheduler and the HTTP layer update, and rendering
them for GET /metrics. Does not cover: deciding anything from them (service.py).
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)
PHASE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)
# a verdict's phase_seconds also holds diagnostics that are not phases of its wall time (the
# timed rounds' parts, lead sums and maxima, counts): not observed as phases
_NOT_PHASES = ("round_",)


class ServiceMetrics:
    """All metrics of one EvalService; names start with `tritonforge_eval_`."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "tritonforge_eval_requests",
            "Answered evaluations by endpoint and verdict status (or rejection reason)",
            ["endpoint", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "tritonforge_eval_request_seconds",
            "End-to-end latency of answered evaluations (queue + judge)",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.run_seconds = Histogram(
            "tritonforge_eval_run_seconds",
            "Time the judge spent on one evaluation",
            ["device"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.phases = Histogram(
            "tritonforge_eval_phase_seconds",
            "Seconds one evaluation spent in a phase: queue (the service's), admission_wait, "
            "spawn, import, compile, correctness, check, replay_load, replay, gate_wait, "
            "timer_load, timed_rounds, recheck, ... (a verdict's phase_seconds)",
            ["phase"],
            buckets=PHASE_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "tritonforge_eval_queue_depth", "Evaluations waiting for a worker", registry=r
        )
        self.busy = Gauge(
            "tritonforge_eval_busy_workers", "Evaluations running", ["device"], registry=r
        )
        self.cache_hits = Counter(
            "tritonforge_eval_cache_hits",
            "Verdicts served from the cache or shared with an identical in-flight request",
            registry=r,
        )
        self.cache_misses = Counter(
            "tritonforge_eval_cache_misses", "Requests the cache could not answer", registry=r
        )
        self.worker_crashes = Counter(
            "tritonforge_eval_worker_crashes",
            "Sandboxed workers that died (crash or killed for a resource limit)",
            ["device"],
            registry=r,
        )
        self.judge_errors = Counter(
            "tritonforge_eval_judge_errors",
            "internal_error verdicts caused by the judge or device, not the candidate",
            ["device"],
            registry=r,
        )
        self.judge_faults = Counter(
            "tritonforge_eval_judge_faults",
            "judge_fault verdicts: the judge's own failure (out of device memory after a retry "
            "alone, timing process died twice); not candidate statuses",
            ["device"],
            registry=r,
        )
        self.quarantined = Gauge(
            "tritonforge_eval_device_quarantined",
            "1 while a device is quarantined",
            ["device"],
            registry=r,
        )
        self.rejected = Counter(
            "tritonforge_eval_rejected",
            "Requests refused before evaluation (queue_full, unavailable, bad_request, auth, too_large)",
            ["reason"],
            registry=r,
        )
        self.cancelled = Counter(
            "tritonforge_eval_cancelled",
            "Requests whose client went away before the answer",
            registry=r,
        )

    def observe_phases(self, phases: dict[str, float]) -> None:
        for name, seconds in phases.items():
            if not name.startswith(_NOT_PHASES) and seconds >= 0:
                self.phases.labels(name).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
