"""The judge: evaluates one candidate against one problem and always returns a Verdict.

Covers: `Evaluator` (per device: fork server, memory budget, gate, timing process; a shared
reference cache; the hidden seeds) with `evaluate` and `evaluate_group`: the static phase (checks.py),
the reference in this trusted process, memory admission on the device, then the admitted phases
(phases.py: the candidate in a fresh sandboxed worker, correctness trials with hidden seeds and
several input distributions, the trusted replay, exclusive timing against the reference in the
device's timing process, the re-check), and the Evaluator's own retries; and `LocalBackend` (the
async EvalBackend over an Evaluator). The phases get what they use of it as one `JudgeTools`
record (tools.py), never the Evaluator. Never raises for a bad candidate and never returns None;
a broken reference or judge bug is an `internal_error` verdict. Out of device memory: a problem
that cannot fit the device's budget even alone is `resource_limit` (with the bytes); a worker's
out-of-memory error while other evaluations held memory on the device, or the judge's own, is
judged again alone once; the judge's own a second time is `judge_fault` (or `resource_limit`
when the reference itself does not fit).
Does not cover: the admitted phases (phases.py, trials.py, replay.py, gpu_timing.py), isolation
(sandbox/isolation.py), the worker side (sandbox/worker.py), HTTP (service/server.py), the
per-device resources (resources.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import secrets
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

import torch

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.admission import DoesNotFit, JudgeOutOfMemory, gib
from tritonforge.evaluation.judge.candidate import Stop, judge_oom_verdict
from tritonforge.evaluation.judge.checks import StaticResult, run_static
from tritonforge.evaluation.judge.forkserver import ForkServer
from tritonforge.evaluation.judge.group_timing import TimingGroup
from tritonforge.evaluation.judge.phases import Job, judge_admitted
from tritonforge.evaluation.judge.reference import (
    Case,
    Reference,
    ReferenceError,
    ReferenceStore,
    meta_footprint,
)
from tritonforge.evaluation.judge.resources import DeviceResources
from tritonforge.evaluation.judge.tools import JudgeTools, Shares
from tritonforge.evaluation.judge.workerenv import device_label, resolve_device
from tritonforge.evaluation.sandbox.classify import is_device_oom
from tritonforge.logging_setup import get_logger
from tritonforge.types import Problem, Status, Verdict

log = get_logger("evaluation.judge")
# Phase-by-phase progress at DEBUG ("reference", "compile", "correctness trial 2/5", ...): off by
# default; `tritonforge eval-kernel` shows it on stderr while a long evaluation runs.
progress = get_logger("evaluation.progress")


class Evaluator:
    """Thread-safe judge. Per device: a fork server, a memory budget, a gate (correctness of
    many candidates overlaps; timing is exclusive) and a trusted timing process; a shared
    reference cache."""

    def __init__(self, settings: EvalSettings | None = None, cache_bytes: int | None = None):
        self.settings = settings or EvalSettings()
        self.refs = ReferenceStore(cache_bytes or self.settings.reference_cache_bytes())
        self.refs.device_room = self._case_room
        self.secret = (
            self.settings.secret_seed
            if self.settings.secret_seed is not None
            else secrets.randbits(62)
        )
        self._devices: dict[str, DeviceResources] = {}
        self._lock = threading.Lock()
        self.sandbox_warnings: list[str] = []
        self.transport_stats: Counter[str] = Counter()  # "shared" or "memfd: <why>" per worker
        self.retries: Counter[str] = Counter()  # "worker_oom" / "judge_oom": judged again alone
        self._local = threading.local()  # .group: the TimingGroup of an evaluate_group thread
        # what the phases use of this Evaluator (tools.py): they never see it
        self.tools = JudgeTools(
            case=self.case,
            seed=self.seed,
            resources=self.resources,
            shares=Shares(),
            transport_used=self._count_transport,
        )

    # -- resources -------------------------------------------------------------------------
    def resources(self, device: str) -> DeviceResources:
        """The device's fork server, gate, memory budget and timing process (made on first use;
        the budget comes from this Evaluator's settings)."""
        with self._lock:
            res = self._devices.get(device)
            if res is None:
                res = self._devices[device] = DeviceResources(device, self.settings, self.refs)
            return res

    def server(self, device: str) -> ForkServer:
        return self.resources(device).ensure_server()

    def started(self) -> dict[str, DeviceResources]:
        """The devices used so far and their resources (fork server, timing process, ...)."""
        with self._lock:
            return dict(self._devices)

    def _case_room(self, device: str) -> float:
        with self._lock:
            res = self._devices.get(device)
        return res.case_room() if res is not None else float("inf")

    def device_stats(self) -> dict[str, dict[str, Any]]:
        """Per device: budget, reservations, resident bytes, timings, timing-process restarts."""
        with self._lock:
            devices = dict(self._devices)
        return {name: res.stats() for name, res in devices.items()}

    def memory_note(self) -> str:
        """Where each device's bytes are now (judge allocator, caches, timing process,
        reservations, free), for the notes of a verdict that met an out-of-memory error."""
        with self._lock:
            devices = dict(self._devices)
        return "; ".join(
            f"{name}: " + ", ".join(f"{k} {gib(v)}" for k, v in res.memory().items())
            for name, res in devices.items()
        )

    def close(self) -> None:
        with self._lock:
            devices, self._devices = list(self._devices.values()), {}
        for res in devices:
            res.close()
        self.refs.clear()
        if torch.cuda.is_initialized():  # what the cases held goes back to the device
            torch.cuda.empty_cache()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def seed(self, problem: Problem, trial: int) -> int:
        h = hashlib.sha256(f"{self.secret}:{problem.id}:{trial}".encode()).hexdigest()
        return int(h[:12], 16)

    # -- evaluation --------------------------------------------------------------------------
    def evaluate_group(
        self,
        problem: Problem,
        sources: list[str | None],
        settings: EvalSettings | None = None,
        group: TimingGroup | None = None,
        workers: int | None = None,
    ) -> list[Verdict]:
        """Judge several candidates of one problem (a GRPO group) side by side, their timings
        in one interleaved round-robin against one reference (group_timing.py; `group`: to see
        its batches), at most `workers` at a time (default: all). Verdicts in the order of
        `sources`. Never raises."""
        group = group if group is not None else TimingGroup()

        def one(source: str | None) -> Verdict:
            return self.evaluate(problem, source, settings, group=group)

        threads = max(1, min(len(sources), workers or len(sources)))
        with ThreadPoolExecutor(threads, thread_name_prefix="tf-group") as pool:
            return list(pool.map(one, sources))

    def evaluate(
        self,
        problem: Problem,
        source: str | None,
        settings: EvalSettings | None = None,
        group: TimingGroup | None = None,
    ) -> Verdict:
        """Judge `source` against `problem`; with `group`, timed together with the group's other
        members (group_timing.py). Never raises; always a Verdict."""
        if group is not None:
            self._local.group = group
            try:
                return self.evaluate(problem, source, settings)
            finally:
                self._local.group = None
        s = settings or self.settings
        t0 = time.monotonic()
        verdict, retry = self._attempt(problem, source, s, alone=False)
        # where the device's bytes were when the first attempt met an out-of-memory error
        oom = retry is not None or "out of device memory" in (verdict.message or "")
        memory = self.memory_note() if oom else ""
        notes: list[str] = []
        if retry is not None:  # out of device memory with others on the device: once, alone
            self.retries[retry] += 1
            first = verdict.message.splitlines()[0][:300] if verdict.message else retry
            verdict, _ = self._attempt(problem, source, s, alone=True)
            notes.append(f"judged again alone on the device after: {first}")
        elif verdict.status is Status.JUDGE_FAULT and "too busy" in verdict.message:
            first = verdict.message  # the machine starved the worker (budget.py): once more
            verdict, _ = self._attempt(problem, source, s, alone=False)
            notes.append(f"judged twice: the first attempt was the evaluator's fault ({first})")
        if memory:
            notes.append(f"device memory after the first attempt: {memory}")
        changed = s.preset_overrides()
        if changed:
            notes.append(f"preset {s.preset} with other values for: {', '.join(changed)}")
        return verdict.model_copy(
            update={
                "notes": [*verdict.notes, *notes],
                "problem_id": problem.id,
                "mode": s.mode,
                "preset": s.preset,
                "wall_seconds": round(time.monotonic() - t0, 3),
                "correct": verdict.status is Status.CORRECT,
            }
        )

    def _attempt(
        self, problem: Problem, source: str | None, s: EvalSettings, alone: bool
    ) -> tuple[Verdict, str | None]:
        """One judgement: the verdict, and why to judge again alone (None: do not)."""
        try:
            verdict, worker_oom = self._evaluate(problem, source, s, alone)
            return verdict, ("worker_oom" if worker_oom and not alone else None)
        except Stop as f:
            return f.verdict, None
        except JudgeOutOfMemory as exc:
            return judge_oom_verdict(exc, alone), (None if alone else "judge_oom")
        except ReferenceError as exc:
            what = "cannot be judged here" if exc.unrunnable else "has a broken reference"
            return Verdict(
                status=Status.INTERNAL_ERROR,
                message=f"the problem {what}: {exc}",
                phase="reference",
            ), None
        except Exception as exc:
            if is_device_oom(exc):
                oom = JudgeOutOfMemory("judging", exc)
                return judge_oom_verdict(oom, alone), (None if alone else "judge_oom")
            log.exception("judge failure on %s", problem.id)
            return Verdict(
                status=Status.INTERNAL_ERROR,
                message=f"evaluator error: {type(exc).__name__}: {exc}",
            ), None

    def _evaluate(
        self, problem: Problem, source: str | None, s: EvalSettings, alone: bool
    ) -> tuple[Verdict, bool]:
        """static → reference → admission → the admitted phases (phases.py): the verdict, and
        whether a worker ran out of device memory while others held memory on the device."""
        static = run_static(source, s.mode, s.backend, s.require_custom_kernel)
        if static.status is not None:
            return _static_verdict(static, device_label(s)), False
        device = resolve_device(s)
        if s.backend == "cuda" and device == "cpu":
            return Verdict(
                status=Status.INTERNAL_ERROR,
                message="the CUDA C++ backend needs a GPU; evaluate on device=cuda",
                phase="static",
                device=device,
            ), False
        ref, judge = self._reference(problem, device)
        res = self.resources(device)
        plan = self._plan(problem, source or "", s)
        try:
            group = None if alone else getattr(self._local, "group", None)
            with (
                res.admitted(ref, lambda: self.case(judge, ref, *plan[0]), alone) as grant,
                group.member() if group is not None else nullcontext() as member,
            ):
                job = Job(problem, source or "", s, device, ref, plan, judge, grant.waited,
                          tuple(static.preimports or ()), member)  # fmt: skip
                got = judge_admitted(self.tools, job)
                # alone, the candidate's own doing: no retry
                return got.verdict, got.device_oom and grant.crowded
        except DoesNotFit as exc:
            fp = ref.footprint or meta_footprint(ref)
            return Verdict(
                status=Status.RESOURCE_LIMIT,
                phase="admission",
                device=device,
                message=f"the problem does not fit this device: {exc} (per evaluation: "
                f"{fp.describe()}, plus worker and judge copies)",
            ), False

    def _reference(
        self, problem: Problem, device: str
    ) -> tuple[Reference, defaultdict[str, float]]:
        """The problem's reference on `device`, and the judge's own phase seconds so far."""
        progress.debug("reference: building the problem's model and inputs on %s", device)
        t = time.monotonic()
        ref = self.refs.reference(problem, device)
        judge: defaultdict[str, float] = defaultdict(float)  # its own: reference, first case
        spent = time.monotonic() - t
        if spent > 0.001:
            judge["reference"] = spent
        return ref, judge

    def case(self, phases: defaultdict[str, float], ref: Reference, seed: int, dist: str) -> Case:
        """A case of `ref` (built, or from the cache); the seconds it took, waits for the
        reference's lock and the device included, are added to `phases["cases"]`."""
        t = time.monotonic()
        try:
            return self.refs.case(ref, seed, dist)
        finally:
            phases["cases"] += time.monotonic() - t

    def _plan(self, problem: Problem, source: str, s: EvalSettings) -> list[tuple[int, str]]:
        """Hidden seeds and input distributions of the trials, in an order varied per candidate."""
        plan = [
            (self.seed(problem, i), s.distributions[i % len(s.distributions)])
            for i in range(s.correctness_trials)
        ]
        random.Random(
            self.secret ^ int(hashlib.sha256(source.encode()).hexdigest()[:12], 16)
        ).shuffle(plan)
        return plan

    def _count_transport(self, how: str) -> None:
        with self._lock:
            self.transport_stats[how] += 1


def _static_verdict(static: StaticResult, device: str) -> Verdict:
    """The verdict of a source the static rules refused (judged without running: `device` is
    the one it was meant for)."""
    return Verdict(
        status=static.status,
        rule=static.rule,
        message=static.message,
        phase="static",
        device=device,
    )


class LocalBackend:
    """EvalBackend over an in-process Evaluator: evaluations run in a bounded thread pool."""

    def __init__(self, evaluator: Evaluator | None = None, concurrency: int = 2):
        self.evaluator = evaluator or Evaluator()
        self.concurrency = concurrency
        self._sem = asyncio.Semaphore(concurrency)

    async def evaluate(
        self, problem: Problem, source: str, settings: EvalSettings | None = None
    ) -> Verdict:
        async with self._sem:
            return await asyncio.to_thread(self.evaluator.evaluate, problem, source, settings)

    async def evaluate_group(
        self, problem: Problem, sources: list[str], settings: EvalSettings | None = None
    ) -> list[Verdict]:
        """Several candidates of one problem judged as a group (their timings together),
        `concurrency` of them at a time: those not yet started are timed later."""
        return await asyncio.to_thread(
            self.evaluator.evaluate_group, problem, sources, settings, None, self.concurrency
        )

    async def aclose(self) -> None:
        await asyncio.to_thread(self.evaluator.close)
