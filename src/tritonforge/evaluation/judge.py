"""The judge: evaluates one candidate against one problem and always returns a Verdict.

Covers: `Evaluator.evaluate` (static checks, reference in this trusted process, the candidate in
a fresh sandboxed worker, correctness trials with hidden seeds and several input distributions,
audit decisions, GPU timing interleaved with the live reference, plausibility, reward) and
`LocalBackend` (the async EvalBackend over an Evaluator). Never raises for a bad candidate and
never returns None; a broken reference or judge bug is an `internal_error` verdict.
Does not cover: isolation (sandbox.py), the worker side (worker.py), HTTP (server.py).
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

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.checks import run_static
from tritonforge.evaluation.compare import compare, tf32_hint
from tritonforge.evaluation.decide import (
    audit_record,
    audit_switches,
    decide_audit,
)
from tritonforge.evaluation.forkserver import ForkServer
from tritonforge.evaluation.gpu_lock import judge_device
from tritonforge.evaluation.gpu_timing import Stop, time_candidate
from tritonforge.evaluation.protocol import Deadline, PeerClosed, ProtocolError, pack
from tritonforge.evaluation.reference import (
    INIT_SEED,
    Case,
    Reference,
    ReferenceError,
    ReferenceStore,
)
from tritonforge.evaluation.rewards import compute_reward
from tritonforge.evaluation.session import Session, describe_exit
from tritonforge.evaluation.transport import Transport
from tritonforge.evaluation.workerenv import (
    base_env,
    device_label,
    private_scratch,
    resolve_device,
    worker_spec,
)
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
        self._timers: dict[str, Any] = {}  # device -> timing.ReferenceTimer
        self._compiled: dict[tuple[str, str], Any] = {}
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
        try:
            v = self._run(session, problem, ref, source or "", s, device, phases)
        except Stop as f:
            v = f.verdict
        finally:
            session.close()
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
        v.device = device
        v.stdout_tail = session.stdout.text()
        v.stderr_tail = session.stderr.text()
        v.phase_seconds = {k: round(x, 4) for k, x in phases.items()}
        if device == "cpu":
            v.notes.append(
                "timing not measured: the CPU Triton interpreter checks correctness only; speedup is null"
            )
        return v

    def _call(
        self,
        session: Session,
        msg: dict[str, Any],
        fds: list[int],
        budget: float,
        phase: str,
        compiled: bool,
        total: float | None = None,
    ) -> tuple[dict[str, Any], list[int]]:
        """One request to the worker within `budget` seconds; `total` is the phase's whole
        budget as configured (what a timeout message names), when `budget` is what is left."""
        try:
            return session.request(msg, fds, time.monotonic() + budget)
        except Deadline:
            raise Stop(
                Verdict(
                    status=Status.TIMEOUT,
                    phase=phase,
                    compiled=compiled,
                    message=f"{phase} took longer than its {total or budget:g} s budget",
                )
            ) from None
        except PeerClosed:
            ended = session.wait_exit(5.0)
            if ended is None and not session.server.alive:  # not the candidate's doing
                raise Stop(
                    Verdict(
                        status=Status.INTERNAL_ERROR,
                        phase=phase,
                        message="the evaluator's fork server died during this evaluation; "
                        "the candidate was not judged",
                    )
                ) from None
            status, why = describe_exit(ended, session.stderr.text)
            raise Stop(
                Verdict(
                    status=Status(status),
                    phase=phase,
                    compiled=compiled,
                    message=f"during {phase}: {why}",
                )
            ) from None
        except ProtocolError as exc:
            raise Stop(
                Verdict(
                    status=Status.REWARD_HACK,
                    rule="protocol_violation",
                    phase=phase,
                    message=f"the worker's channel was tampered with: {exc}",
                )
            ) from None
        finally:
            for fd in fds:
                os.close(fd)

    def _load(
        self,
        session: Session,
        ref: Reference,
        source: str,
        s: EvalSettings,
        device: str,
        phases: dict[str, float],
        first: Case,
    ) -> Verdict | list[str]:
        """Import the candidate and build ModelNew in the worker: a failure verdict, or notes.
        The shared device buffers (sized for the `first` case) are offered with the request."""
        init_desc, init_fd = pack(ref.init_inputs)
        shared, shared_fds = session.transport.offer(first)
        msg = {
            "op": "load",
            "source": source,
            "init_inputs": init_desc,
            "init_seed": INIT_SEED,
            "device": "cpu" if device == "cpu" else "cuda:0",
            "backend": s.backend,
            "mode": s.mode,
            **shared,
        }
        t = time.monotonic()
        reply, extra = self._call(
            session, msg, [init_fd, *shared_fds], s.budgets.import_s, "import", False
        )
        for fd in extra:  # the worker attaches nothing to this reply
            os.close(fd)
        phases["import"] = time.monotonic() - t
        if isinstance(reply.get("cuda_init_s"), (int, float)):
            phases["cuda_init"] = float(reply["cuda_init_s"])
        if not reply.get("ok"):
            return self._from_failure(reply, "import", False)
        tr = session.transport
        tr.accept(reply)
        with self._lock:
            self.transport_stats["shared" if tr.active else f"memfd: {tr.reason}"] += 1
        sandbox = reply.get("sandbox") or {}
        return [f"sandbox: {sandbox.get('user', 'unknown')}"] + [
            f"sandbox warning: {w}" for w in sandbox.get("warnings", [])
        ]

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
        i: int,
        dist: str,
        reply: dict[str, Any],
        outputs: Any,
        expected: Any,
        problem: Problem,
        s: EvalSettings,
        session: Session,
        records: list[dict[str, Any]],
        compiled: bool,
        notes: list[str],
    ) -> Verdict | None:
        """The verdict a finished trial forces (hack, mismatch, mutation), or None to go on."""
        phase = "compile" if i == 0 else "correctness"
        common = {
            "compiled": compiled,
            "audit": audit_record(records),
            "trials_total": s.correctness_trials,
            "trials_passed": i,
        }
        hack = decide_audit(reply["audit"], reply.get("facts") or {}, s, session.unsolicited)
        if hack:
            return Verdict(
                status=Status.REWARD_HACK, rule=hack[0], message=hack[1], phase=phase, **common
            )
        with judge_device(session.transport.device):
            status, mm, why = compare(
                expected, outputs, s.tolerance, s.nan_policy, problem.atol, problem.rtol
            )
        if status is not Status.CORRECT:
            mm.trial, mm.distribution = i, dist
            msg = f"trial {i + 1}/{s.correctness_trials} (inputs: {dist}): {why}"
            return Verdict(
                status=status, mismatch=mm, message=msg, phase="correctness", notes=notes, **common
            )
        mutated = (reply.get("facts") or {}).get("mutated") or []
        if mutated:
            msg = f"forward modified its input(s) {mutated} in place; inputs must be left unchanged"
            return Verdict(status=Status.INPUT_MUTATED, message=msg, phase="correctness", **common)
        return None

    def _run(
        self,
        session: Session,
        problem: Problem,
        ref: Reference,
        source: str,
        s: EvalSettings,
        device: str,
        phases: dict[str, float],
    ) -> Verdict:
        plan = self._plan(problem, source, s)
        progress.debug("import: loading the candidate")
        notes = self._load(session, ref, source, s, device, phases, self.refs.case(ref, *plan[0]))
        if isinstance(notes, Verdict):
            return notes
        records: list[dict[str, Any]] = []
        compiled = False
        # the correctness budget is the candidate's own time over the trials after the first:
        # the judge's work between trials (reference outputs, comparison) is not charged to it
        correctness_left = s.budgets.correctness_s
        for i, (seed, dist) in enumerate(plan):
            phase = "compile" if i == 0 else "correctness"
            total = s.budgets.compile_s if i == 0 else s.budgets.correctness_s
            progress.debug("reference outputs: trial %d/%d (%s inputs)", i + 1, len(plan), dist)
            case = self.refs.case(ref, seed, dist)
            carry, carry_fds = session.transport.send(case)
            msg = {"op": "run", **carry, **audit_switches(last_trial=i == len(plan) - 1)}
            progress.debug("%s: trial %d/%d", phase, i + 1, len(plan))
            t = time.monotonic()
            budget = total if i == 0 else max(0.1, correctness_left)
            reply, fds = self._call(session, msg, carry_fds, budget, phase, compiled, total)
            spent = time.monotonic() - t
            phases[phase] = phases.get(phase, 0.0) + spent
            if i > 0:
                correctness_left -= spent
            # compiled: a kernel launched; for the CUDA backend the extension built at import
            # and forward ran (its launches happen inside native code the recorder cannot see)
            compiled = compiled or (reply.get("audit") or {}).get("launches_ok", 0) > 0
            compiled = compiled or (s.backend == "cuda" and bool(reply.get("ok")))
            if not reply.get("ok"):
                for fd in fds:
                    os.close(fd)
                v = self._from_failure(reply, phase, compiled)
                v.trials_total, v.trials_passed = s.correctness_trials, i
                return v
            t = time.monotonic()
            outputs = self._outputs(session, reply, fds)
            # the judge's own look at the shared input buffer joins the worker's report
            seen = session.transport.mutated(case, bool(carry.get("shared")))
            if seen:
                reply["facts"] = merge_mutated(reply.get("facts"), seen)
            records.append(reply["audit"])
            stop = self._check_trial(
                i,
                dist,
                reply,
                outputs,
                case.expected,
                problem,
                s,
                session,
                records,
                compiled,
                notes,
            )
            phases["check"] = phases.get("check", 0.0) + time.monotonic() - t
            if stop is not None:
                if stop.status is Status.NUMERICAL_MISMATCH and device != "cpu":
                    stop.message += tf32_hint(source, case.expected)
                return stop
        n = len(plan)
        v = Verdict(
            status=Status.CORRECT,
            compiled=compiled,
            trials_total=n,
            trials_passed=n,
            audit=audit_record(records),
            notes=notes,
            message="all correctness trials passed",
        )
        if device != "cpu" and s.measure_performance:
            time_candidate(self, session, problem, ref, s, device, v, phases, records)
        return v

    def _outputs(self, session: Session, reply: dict[str, Any], fds: list[int]) -> Any:
        """The worker's outputs, copied once into the judge's memory on its device (where the
        expected outputs live, so the comparison runs there)."""
        try:
            return session.transport.outputs(reply, fds)
        except ProtocolError as exc:
            raise Stop(
                Verdict(
                    status=Status.REWARD_HACK,
                    rule="protocol_violation",
                    message=f"malformed outputs from the worker: {exc}",
                )
            ) from None

    @staticmethod
    def _from_failure(reply: dict[str, Any], phase: str, compiled: bool) -> Verdict:
        try:
            status = Status(reply.get("status", "internal_error"))
        except ValueError:
            status = Status.REWARD_HACK
        violations = (reply.get("audit") or {}).get("violations") or []
        if violations:  # a blocked action raised: the violation, not the exception, is the verdict
            rule = violations[0].split(":", 1)[0]
            return Verdict(
                status=Status.REWARD_HACK,
                rule=rule,
                phase=phase,
                compiled=compiled,
                message=f"blocked: {violations[0]}",
            )
        if status is Status.CORRECT:
            status = Status.REWARD_HACK
        msg = str(reply.get("message", ""))[:8000]
        return Verdict(
            status=status,
            phase=reply.get("phase", phase) if status is not Status.COMPILE_ERROR else "compile",
            compiled=compiled and status is not Status.COMPILE_ERROR,
            message=msg,
        )


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
