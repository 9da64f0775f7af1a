"""The judge: evaluates one candidate against one problem and always returns a Verdict.

Covers: `Evaluator.evaluate` (static checks, reference in this trusted process, the candidate in
a fresh sandboxed worker, correctness trials with hidden seeds and several input distributions,
audit decisions, GPU timing interleaved with the live reference, plausibility, reward) and
`LocalBackend` (the async EvalBackend over an Evaluator). Never raises for a bad candidate and
never returns None; a broken reference or judge bug is an `internal_error` verdict.
Does not cover: isolation (sandbox/isolation.py), the worker side (sandbox/worker.py), HTTP (service/server.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import secrets
import shutil
import threading
import time
from collections import Counter
from typing import Any

import torch

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.candidate import CandidateRun, Stop, failure_verdict
from tritonforge.evaluation.judge.checks import run_static
from tritonforge.evaluation.judge.compare import compare, tf32_hint
from tritonforge.evaluation.judge.decide import (
    audit_record,
    audit_switches,
    check_integrity,
    decide_audit,
    reclassify,
)
from tritonforge.evaluation.judge.forkserver import ForkServer
from tritonforge.evaluation.judge.gpu_lock import judge_device
from tritonforge.evaluation.judge.gpu_timing import time_candidate
from tritonforge.evaluation.judge.reference import (
    INIT_SEED,
    Case,
    Reference,
    ReferenceError,
    ReferenceStore,
)
from tritonforge.evaluation.judge.rewards import compute_reward
from tritonforge.evaluation.judge.session import Session
from tritonforge.evaluation.judge.timing import ReferenceTimer
from tritonforge.evaluation.judge.transport import Transport
from tritonforge.evaluation.judge.work import custom_share, reference_work
from tritonforge.evaluation.judge.workerenv import (
    base_env,
    device_label,
    private_scratch,
    resolve_device,
    worker_spec,
)
from tritonforge.evaluation.sandbox.protocol import map_tensors, pack
from tritonforge.logging_setup import get_logger
from tritonforge.types import Problem, Status, Verdict

log = get_logger("evaluation.judge")
# Phase-by-phase progress at DEBUG ("reference", "compile", "correctness trial 2/5", ...): off by
# default; `tritonforge eval-kernel` shows it on stderr while a long evaluation runs.
progress = get_logger("evaluation.progress")


class Evaluator:
    """Thread-safe judge. One fork server per device, a shared reference cache, a timing lock
    per GPU (correctness of many candidates overlaps; timing is exclusive)."""

    def __init__(self, settings: EvalSettings | None = None, cache_bytes: int | None = None):
        self.settings = settings or EvalSettings()
        self.refs = ReferenceStore(cache_bytes or self.settings.reference_cache_bytes())
        self.secret = (
            self.settings.secret_seed
            if self.settings.secret_seed is not None
            else secrets.randbits(62)
        )
        self._servers: dict[str, ForkServer] = {}
        self._timers: dict[str, ReferenceTimer] = {}
        self._compiled: dict[tuple[str, str], Any] = {}
        self._work: dict[tuple[str, str], float] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.sandbox_warnings: list[str] = []
        self.transport_stats: Counter[str] = Counter()  # "shared" or "memfd: <why>" per worker

    # -- resources -------------------------------------------------------------------------
    def server(self, device: str) -> ForkServer:
        with self._lock:
            srv = self._servers.get(device)
            if srv is None:
                srv = ForkServer(base_env(device))
                self._servers[device] = srv
        with self._locks.setdefault(f"start:{device}", threading.Lock()):
            srv.ensure()
        return srv

    def timing_lock(self, device: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(f"time:{device}", threading.Lock())

    def reference_timer(self, device: str) -> ReferenceTimer:
        """The timer of the live reference on `device` (one per device, reused)."""
        with self._lock:
            return self._timers.setdefault(device, ReferenceTimer(device))

    def compiled_reference(self, problem: Problem, ref: Reference) -> Any:
        """torch.compile(reference), once per problem and device (the second baseline)."""
        key = (problem.id, ref.device)
        with self._lock:
            if key not in self._compiled:
                self._compiled[key] = torch.compile(ref.model)
            return self._compiled[key]

    def close(self) -> None:
        for srv in self._servers.values():
            srv.close()
        self._servers.clear()
        self.refs.clear()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def seed(self, problem: Problem, trial: int) -> int:
        h = hashlib.sha256(f"{self.secret}:{problem.id}:{trial}".encode()).hexdigest()
        return int(h[:12], 16)

    # -- evaluation --------------------------------------------------------------------------
    def evaluate(
        self, problem: Problem, source: str | None, settings: EvalSettings | None = None
    ) -> Verdict:
        """Judge `source` against `problem`. Never raises; always a Verdict."""
        s = settings or self.settings
        t0 = time.monotonic()
        try:
            verdict = self._evaluate(problem, source, s)
        except Stop as f:
            verdict = f.verdict
        except ReferenceError as exc:
            verdict = Verdict(
                status=Status.INTERNAL_ERROR,
                message=f"the problem's reference is broken: {exc}",
                phase="reference",
            )
        except Exception as exc:
            log.exception("judge failure on %s", problem.id)
            verdict = Verdict(
                status=Status.INTERNAL_ERROR,
                message=f"evaluator error: {type(exc).__name__}: {exc}",
            )
        verdict.problem_id = problem.id
        verdict.mode = s.mode
        verdict.wall_seconds = round(time.monotonic() - t0, 3)
        verdict.correct = verdict.status is Status.CORRECT
        try:
            verdict.reward = compute_reward(verdict, s.reward, s.hack_penalty)
        except KeyError as exc:  # an unknown reward name is a settings error, not an exception
            verdict = Verdict(
                status=Status.INTERNAL_ERROR,
                message=f"evaluator settings error: {exc.args[0] if exc.args else exc}",
                problem_id=problem.id,
                mode=s.mode,
                phase="reward",
                wall_seconds=verdict.wall_seconds,
            )
        return verdict

    def _evaluate(self, problem: Problem, source: str | None, s: EvalSettings) -> Verdict:
        static = run_static(source, s.mode, s.backend)
        if static.status is not None:
            return Verdict(
                status=static.status,
                rule=static.rule,
                message=static.message,
                phase="static",
                device=device_label(s),  # judged without running: the device it was meant for
            )
        device = resolve_device(s)
        if s.backend == "cuda" and device == "cpu":
            return Verdict(
                status=Status.INTERNAL_ERROR,
                message="the CUDA C++ backend needs a GPU; evaluate on device=cuda",
                phase="static",
                device=device,
            )
        progress.debug("reference: building the problem's model and inputs on %s", device)
        ref = self.refs.reference(problem, device)
        progress.debug("spawn: starting a sandboxed worker")
        scratch = None if s.sandbox != "rlimits" else private_scratch()
        spec = worker_spec(s, device, scratch)
        phases: dict[str, float] = {}
        t = time.monotonic()
        session = Session(self.server(device), spec, s.limits.output_bytes)
        session.transport = Transport(device, s.transport)
        phases["spawn"] = time.monotonic() - t
        run = CandidateRun(problem, source or "", s, device, session, ref, phases)
        try:
            v = self._run(run)
        except Stop as f:
            v = f.verdict
        finally:
            session.close()
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
        v.device = device
        v.notes = run.notes + [n for n in v.notes if n not in run.notes]  # sandbox warnings: always
        v.stdout_tail = session.stdout.text()
        v.stderr_tail = session.stderr.text()
        v.phase_seconds = {k: round(x, 4) for k, x in phases.items()}
        if device == "cpu":
            v.notes.append(
                "timing not measured: the CPU Triton interpreter checks correctness only; speedup is null"
            )
        return v

    def _load(self, run: CandidateRun, first: Case) -> Verdict | None:
        """Import the candidate and build ModelNew in the worker: a failure verdict, or None (the
        sandbox's notes join `run.notes`). The shared device buffers (sized for the `first`
        case) are offered with the request."""
        s, session = run.settings, run.session
        init_desc, init_fd = pack(run.ref.init_inputs)
        shared, shared_fds = session.transport.offer(first)
        msg = {
            "op": "load",
            "source": run.source,
            "init_inputs": init_desc,
            "init_seed": INIT_SEED,
            "device": "cpu" if run.device == "cpu" else "cuda:0",
            "backend": s.backend,
            "mode": s.mode,
            **shared,
        }
        t = time.monotonic()
        reply, extra = run.call(msg, [init_fd, *shared_fds], s.budgets.import_s, "import")
        for fd in extra:  # the worker attaches nothing to this reply
            os.close(fd)
        run.phases["import"] = time.monotonic() - t
        if isinstance(reply.get("cuda_init_s"), (int, float)):
            run.phases["cuda_init"] = float(reply["cuda_init_s"])
        if not reply.get("ok"):
            return failure_verdict(reply, "import", False)
        run.armed = str(((reply.get("audit") or {}).get("integrity") or {}).get("armed") or "")
        tr = session.transport
        tr.accept(reply)
        with self._lock:
            self.transport_stats["shared" if tr.active else f"memfd: {tr.reason}"] += 1
        sandbox = reply.get("sandbox") or {}
        run.notes += [f"sandbox: {sandbox.get('user', 'unknown')}"] + [
            f"sandbox warning: {w}" for w in sandbox.get("warnings", [])
        ]
        return None

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

    def _check_trial(
        self,
        run: CandidateRun,
        i: int,
        dist: str,
        reply: dict[str, Any],
        outputs: Any,
        expected: Any,
    ) -> Verdict | None:
        """The verdict a finished trial forces (hack, mismatch, mutation), or None to go on."""
        s = run.settings
        phase = "compile" if i == 0 else "correctness"
        common = {
            "compiled": run.compiled,
            "audit": audit_record(run.records),
            "trials_total": s.correctness_trials,
            "trials_passed": i,
        }
        audit, facts = reply["audit"], reply.get("facts") or {}
        # the first trial's calls may do one-off work (autotuning, a weight layout): not compared
        history = run.signatures[1:] if i > 0 else None
        hack = check_integrity(run.armed, audit) or decide_audit(
            audit, facts, s, run.session.unsolicited, history
        )
        run.signatures.append(str(facts.get("signature")))
        if hack:
            return Verdict(
                status=Status.REWARD_HACK, rule=hack[0], message=hack[1], phase=phase, **common
            )
        with judge_device(run.session.transport.device):
            status, mm, why = compare(
                expected, outputs, s.tolerance, s.nan_policy, run.problem.atol, run.problem.rtol
            )
        if status is not Status.CORRECT:
            mm.trial, mm.distribution = i, dist
            msg = f"trial {i + 1}/{s.correctness_trials} (inputs: {dist}): {why}"
            return Verdict(
                status=status,
                mismatch=mm,
                message=msg,
                phase="correctness",
                notes=run.notes,
                **common,
            )
        mutated = (reply.get("facts") or {}).get("mutated") or []
        if mutated:
            msg = f"forward modified its input(s) {mutated} in place; inputs must be left unchanged"
            return Verdict(status=Status.INPUT_MUTATED, message=msg, phase="correctness", **common)
        return None

    def share(self, run: CandidateRun, case: Case, audit: dict[str, Any]) -> float | None:
        """Hybrid: the custom-kernel share of this trial by work (judge/work.py); the reference's
        own work is profiled once per problem and device, here in the judge."""
        key = (run.problem.id, run.device)
        if not audit.get("ops"):
            return 1.0  # PyTorch computed nothing
        if run.settings.mode != "hybrid":
            return None  # strict rejects the compute anyway; no shapes were recorded
        if key not in self._work and audit.get("op_shapes"):
            with run.ref.lock, judge_device(run.device):
                inputs = [map_tensors(v, lambda t: t.clone()) for v in case.inputs]
                self._work[key] = reference_work(run.ref.model, inputs, run.device)
        return custom_share(audit.get("op_shapes"), self._work.get(key))

    def _run(self, run: CandidateRun) -> Verdict:
        s, session = run.settings, run.session
        plan = self._plan(run.problem, run.source, s)
        progress.debug("import: loading the candidate")
        failed = self._load(run, self.refs.case(run.ref, *plan[0]))
        if failed is not None:
            return failed
        # the correctness budget is the candidate's own time over the trials after the first:
        # the judge's work between trials (reference outputs, comparison) is not charged to it
        correctness_left = s.budgets.correctness_s
        for i, (seed, dist) in enumerate(plan):
            phase = "compile" if i == 0 else "correctness"
            total = s.budgets.compile_s if i == 0 else s.budgets.correctness_s
            progress.debug("reference outputs: trial %d/%d (%s inputs)", i + 1, len(plan), dist)
            case = self.refs.case(run.ref, seed, dist)
            carry, carry_fds = session.transport.send(case)
            msg = {"op": "run", **carry, **audit_switches(last_trial=i == len(plan) - 1)}
            progress.debug("%s: trial %d/%d", phase, i + 1, len(plan))
            t = time.monotonic()
            budget = total if i == 0 else max(0.1, correctness_left)
            reply, fds = run.call(msg, carry_fds, budget, phase, total)
            spent = time.monotonic() - t
            run.phases[phase] = run.phases.get(phase, 0.0) + spent
            if i > 0:
                correctness_left -= spent
            # compiled: a kernel launched; for the CUDA backend the extension built at import
            # and forward ran (its launches happen inside native code the recorder cannot see)
            run.compiled = run.compiled or (reply.get("audit") or {}).get("launches_ok", 0) > 0
            run.compiled = run.compiled or (s.backend == "cuda" and bool(reply.get("ok")))
            if not reply.get("ok"):
                for fd in fds:
                    os.close(fd)
                v = failure_verdict(reply, phase, run.compiled)
                v.trials_total, v.trials_passed = s.correctness_trials, i
                return v
            t = time.monotonic()
            outputs = run.outputs(reply, fds)
            # the judge's own look at the shared input buffer joins the worker's report
            seen = session.transport.mutated(case, bool(carry.get("shared")))
            if seen:
                reply["facts"] = merge_mutated(reply.get("facts"), seen)
            reclassify(reply["audit"])  # the judge's glue list, not the worker's
            reply["audit"]["custom_share"] = self.share(run, case, reply["audit"])
            run.records.append(reply["audit"])
            stop = self._check_trial(run, i, dist, reply, outputs, case.expected)
            run.phases["check"] = run.phases.get("check", 0.0) + time.monotonic() - t
            if stop is not None:
                if stop.status is Status.NUMERICAL_MISMATCH and run.device != "cpu":
                    stop.message += tf32_hint(run.source, case.expected)
                return stop
        n = len(plan)
        v = Verdict(
            status=Status.CORRECT,
            compiled=run.compiled,
            trials_total=n,
            trials_passed=n,
            audit=audit_record(run.records),
            notes=run.notes,
            message="all correctness trials passed",
        )
        if run.device != "cpu" and s.measure_performance:
            time_candidate(self, run, v)
        return v


def merge_mutated(facts: Any, seen: list[int]) -> dict[str, Any]:
    """The worker's facts with the inputs the judge saw changed added to `mutated`. The worker's
    part is untrusted JSON: anything but a list of ints is ignored, never raised on."""
    facts = facts if isinstance(facts, dict) else {}
    told = facts.get("mutated") if isinstance(facts.get("mutated"), list) else []
    ints = {x for x in told if isinstance(x, int) and not isinstance(x, bool)}
    return {**facts, "mutated": sorted(ints | set(seen))}


class LocalBackend:
    """EvalBackend over an in-process Evaluator: evaluations run in a bounded thread pool."""

    def __init__(self, evaluator: Evaluator | None = None, concurrency: int = 2):
        self.evaluator = evaluator or Evaluator()
        self._sem = asyncio.Semaphore(concurrency)

    async def evaluate(
        self, problem: Problem, source: str, settings: EvalSettings | None = None
    ) -> Verdict:
        async with self._sem:
            return await asyncio.to_thread(self.evaluator.evaluate, problem, source, settings)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.evaluator.close)
