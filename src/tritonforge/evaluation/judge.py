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
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

import tritonforge
from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.checks import run_static
from tritonforge.evaluation.compare import compare, output_bytes
from tritonforge.evaluation.decide import (
    audit_record,
    audit_switches,
    decide_audit,
    decide_timing,
)
from tritonforge.evaluation.forkserver import ForkServer
from tritonforge.evaluation.protocol import Deadline, PeerClosed, ProtocolError, pack, unpack
from tritonforge.evaluation.reference import INIT_SEED, Reference, ReferenceError, ReferenceStore
from tritonforge.evaluation.rewards import compute_reward
from tritonforge.evaluation.sandbox import NOBODY, SandboxSpec
from tritonforge.evaluation.session import Session, describe_exit
from tritonforge.evaluation.timing import ReferenceTimer, stats
from tritonforge.logging_setup import get_logger
from tritonforge.types import Problem, Status, Verdict

log = get_logger("evaluation.judge")

_KEEP_ENV = (
    "PATH",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "TRITON_PTXAS_PATH",
    "TRITON_LIBCUDA_PATH",
    "CC",
    "VIRTUAL_ENV",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
)


class _Failed(Exception):
    """Internal: stop evaluating with this verdict."""

    def __init__(self, verdict: Verdict):
        self.verdict = verdict


def resolve_device(settings: EvalSettings) -> str:
    if settings.device == "cpu" or (settings.device == "auto" and not torch.cuda.is_available()):
        return "cpu"
    if not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was requested but torch sees no CUDA device")
    return f"cuda:{settings.device_index}"


def base_env(device: str) -> dict[str, str]:
    """Minimal environment for the fork server and workers (no secrets, pinned device)."""
    src_root = str(Path(tritonforge.__file__).resolve().parents[1])
    env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        {
            "LANG": "C.UTF-8",
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            # workers are killed, never exit cleanly: unbuffered, so what the candidate printed
            # (e.g. just before a crash) reaches the judge instead of dying in a buffer
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "KINETO_LOG_LEVEL": "5",
        }
    )
    env["PYTHONPATH"] = os.pathsep.join(
        [src_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    if device == "cpu":
        env.update({"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""})
    else:
        idx = int(device.split(":")[1])
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        env["CUDA_VISIBLE_DEVICES"] = visible[idx] if idx < len(visible) else str(idx)
        env["TRITONFORGE_WARM_GPU"] = os.environ.get("TRITONFORGE_WARM_GPU", "1")
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # is_available() without initialising CUDA
    return env


class Evaluator:
    """Thread-safe judge. One fork server per device, a shared reference cache, a timing lock
    per GPU (correctness of many candidates overlaps; timing is exclusive)."""

    def __init__(self, settings: EvalSettings | None = None, cache_bytes: int = 4 << 30):
        self.settings = settings or EvalSettings()
        self.refs = ReferenceStore(cache_bytes)
        self.secret = (
            self.settings.secret_seed
            if self.settings.secret_seed is not None
            else secrets.randbits(62)
        )
        self._servers: dict[str, ForkServer] = {}
        self._timers: dict[str, ReferenceTimer] = {}
        self._compiled: dict[tuple[str, str], Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.sandbox_warnings: list[str] = []

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
        except _Failed as f:
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
                status=static.status, rule=static.rule, message=static.message, phase="static"
            )
        device = resolve_device(s)
        if s.backend == "cuda" and device == "cpu":
            return Verdict(
                status=Status.INTERNAL_ERROR,
                message="the CUDA C++ backend needs a GPU; evaluate on device=cuda",
                phase="static",
                device=device,
            )
        ref = self.refs.reference(problem, device)
        scratch = None if s.sandbox != "rlimits" else _private_scratch()
        spec = _spec(s, device, scratch)
        phases: dict[str, float] = {}
        t = time.monotonic()
        session = Session(self.server(device), spec, s.limits.output_bytes)
        phases["spawn"] = time.monotonic() - t
        try:
            v = self._run(session, problem, ref, source or "", s, device, phases)
        except _Failed as f:
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
    ) -> tuple[dict[str, Any], list[int]]:
        try:
            return session.request(msg, fds, time.monotonic() + budget)
        except Deadline:
            raise _Failed(
                Verdict(
                    status=Status.TIMEOUT,
                    phase=phase,
                    compiled=compiled,
                    message=f"{phase} took longer than its {budget:g} s budget",
                )
            ) from None
        except PeerClosed:
            ended = session.wait_exit(5.0)
            if ended is None and not session.server.alive:  # not the candidate's doing
                raise _Failed(
                    Verdict(
                        status=Status.INTERNAL_ERROR,
                        phase=phase,
                        message="the evaluator's fork server died during this evaluation; "
                        "the candidate was not judged",
                    )
                ) from None
            status, why = describe_exit(ended)
            raise _Failed(
                Verdict(
                    status=Status(status),
                    phase=phase,
                    compiled=compiled,
                    message=f"during {phase}: {why}",
                )
            ) from None
        except ProtocolError as exc:
            raise _Failed(
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
        worker_device = "cpu" if device == "cpu" else "cuda:0"
        init_desc, init_fd = pack(ref.init_inputs)
        t = time.monotonic()
        reply, _ = self._call(
            session,
            {
                "op": "load",
                "source": source,
                "init_inputs": init_desc,
                "init_seed": INIT_SEED,
                "device": worker_device,
                "backend": s.backend,
                "mode": s.mode,
            },
            [init_fd],
            s.budgets.import_s,
            "import",
            False,
        )
        phases["import"] = time.monotonic() - t
        if reply.get("cuda_init_s"):
            phases["cuda_init"] = float(reply["cuda_init_s"])
        sandbox = reply.get("sandbox") or {}
        if not reply.get("ok"):
            return self._from_failure(reply, "import", False)
        notes = [f"sandbox: {sandbox.get('user', 'unknown')}"] + [
            f"sandbox warning: {w}" for w in sandbox.get("warnings", [])
        ]
        plan = [
            (self.seed(problem, i), s.distributions[i % len(s.distributions)])
            for i in range(s.correctness_trials)
        ]
        random.Random(
            self.secret ^ int(hashlib.sha256(source.encode()).hexdigest()[:12], 16)
        ).shuffle(plan)
        records: list[dict[str, Any]] = []
        compiled = False
        correctness_deadline = None
        for i, (seed, dist) in enumerate(plan):
            phase = "compile" if i == 0 else "correctness"
            budget = (
                s.budgets.compile_s if i == 0 else max(0.1, correctness_deadline - time.monotonic())
            )
            case = self.refs.case(ref, seed, dist)
            t = time.monotonic()
            reply, fds = self._call(
                session,
                {
                    "op": "run",
                    "inputs": case.desc,
                    **audit_switches(last_trial=i == len(plan) - 1),
                },
                [os.dup(case.fd)],
                budget,
                phase,
                compiled,
            )
            phases[phase] = phases.get(phase, 0.0) + time.monotonic() - t
            if i == 0:
                correctness_deadline = time.monotonic() + s.budgets.correctness_s
            compiled = compiled or (reply.get("audit") or {}).get("launches_ok", 0) > 0
            if not reply.get("ok"):
                for fd in fds:
                    os.close(fd)
                v = self._from_failure(reply, phase, compiled)
                v.trials_total = s.correctness_trials
                v.trials_passed = i
                return v
            outputs = self._outputs(reply, fds)
            records.append(reply["audit"])
            hack = decide_audit(reply["audit"], reply.get("facts") or {}, s, session.unsolicited)
            if hack:
                return Verdict(
                    status=Status.REWARD_HACK,
                    rule=hack[0],
                    message=hack[1],
                    phase=phase,
                    compiled=compiled,
                    audit=audit_record(records),
                    trials_total=s.correctness_trials,
                    trials_passed=i,
                )
            status, mm, why = compare(
                case.expected, outputs, s.tolerance, s.nan_policy, problem.atol, problem.rtol
            )
            if status is not Status.CORRECT:
                mm.trial, mm.distribution = i, dist
                msg = f"trial {i + 1}/{len(plan)} (inputs: {dist}): {why}"
                return Verdict(
                    status=status,
                    mismatch=mm,
                    message=msg,
                    phase="correctness",
                    compiled=compiled,
                    audit=audit_record(records),
                    trials_total=s.correctness_trials,
                    trials_passed=i,
                    notes=notes,
                )
            mutated = (reply.get("facts") or {}).get("mutated") or []
            if mutated:
                return Verdict(
                    status=Status.INPUT_MUTATED,
                    message=f"forward modified its input(s) {mutated} in place; inputs must be left unchanged",
                    phase="correctness",
                    compiled=compiled,
                    audit=audit_record(records),
                    trials_total=s.correctness_trials,
                    trials_passed=i,
                )
        v = Verdict(
            status=Status.CORRECT,
            compiled=compiled,
            trials_total=len(plan),
            trials_passed=len(plan),
            audit=audit_record(records),
            notes=notes,
            message="all correctness trials passed",
        )
        if device != "cpu" and s.measure_performance:
            self._time(session, problem, ref, s, device, v, phases, records)
        return v

    def _outputs(self, reply: dict[str, Any], fds: list[int]) -> Any:
        try:
            if len(fds) != 1:
                raise ProtocolError(f"expected one output buffer, got {len(fds)}")
            return unpack(reply.get("outputs") or {}, fds[0])
        except ProtocolError as exc:
            raise _Failed(
                Verdict(
                    status=Status.REWARD_HACK,
                    rule="protocol_violation",
                    message=f"malformed outputs from the worker: {exc}",
                )
            ) from None
        finally:
            for fd in fds:
                os.close(fd)

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

    # -- timing ----------------------------------------------------------------------------------
    def _time(
        self,
        session: Session,
        problem: Problem,
        ref: Reference,
        s: EvalSettings,
        device: str,
        v: Verdict,
        phases: dict[str, float],
        records: list[dict[str, Any]],
    ) -> None:
        case = self.refs.case(ref, self.seed(problem, 1000), "native")
        dev_inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in case.inputs]
        per_round = max(2, s.perf_trials // s.perf_rounds)
        cand, base, comp, launches = [], [], [], []
        t = time.monotonic()
        deadline = t + s.budgets.timing_s
        with self.timing_lock(device), torch.cuda.device(device):
            timer = self._timers.get(device) or self._timers.setdefault(
                device, ReferenceTimer(device)
            )
            compiled_ref = self._compiled_ref(problem, ref) if s.compile_baseline else None
            for r in range(s.perf_rounds):
                warm = s.perf_warmup if r == 0 else 1
                reply, _ = self._call(
                    session,
                    {"op": "time", "inputs": case.desc, "warmup": warm, "trials": per_round},
                    [os.dup(case.fd)],
                    max(0.1, deadline - time.monotonic()),
                    "timing",
                    True,
                )
                if not reply.get("ok"):
                    raise _Failed(self._from_failure(reply, "timing", True))
                cand += reply["times_ms"][1:] if r == 0 else reply["times_ms"]
                launches += reply["launches"]
                base += timer.time(ref.model, dev_inputs, warm, per_round)[(1 if r == 0 else 0) :]
                if compiled_ref is not None:
                    comp += timer.time(compiled_ref, dev_inputs, warm, per_round)[
                        (1 if r == 0 else 0) :
                    ]
        phases["timing"] = time.monotonic() - t
        v.runtime, v.ref_runtime = stats(cand, False), stats(base, False)
        v.speedup = (
            v.ref_runtime.median_ms / v.runtime.median_ms if v.runtime.median_ms > 0 else None
        )
        if comp:
            v.ref_compile_runtime = stats(comp, False)
            v.speedup_vs_compile = v.ref_compile_runtime.median_ms / v.runtime.median_ms
        # The candidate may have changed state during timing: check it once more on fresh inputs.
        post = self.refs.case(ref, self.seed(problem, 1001), s.distributions[-1])
        reply, fds = self._call(
            session,
            {"op": "run", "inputs": post.desc, "profile": False},
            [os.dup(post.fd)],
            s.budgets.correctness_s,
            "correctness",
            True,
        )
        if not reply.get("ok"):
            for fd in fds:
                os.close(fd)
            raise _Failed(self._from_failure(reply, "correctness", True))
        status, mm, why = compare(
            post.expected,
            self._outputs(reply, fds),
            s.tolerance,
            s.nan_policy,
            problem.atol,
            problem.rtol,
        )
        nbytes = sum(
            x.numel() * x.element_size() for x in case.inputs if isinstance(x, torch.Tensor)
        ) + output_bytes(case.expected)
        hack = decide_timing(v, launches, records, status is Status.CORRECT, problem, nbytes, s)
        if hack:
            v.status, v.rule, v.message = Status.REWARD_HACK, hack[0], hack[1]
            v.correct = False
        elif status is not Status.CORRECT:
            v.status, v.mismatch, v.message = status, mm, f"after timing, on fresh inputs: {why}"

    def _compiled_ref(self, problem: Problem, ref: Reference) -> Any:
        key = (problem.id, ref.device)
        if key not in self._compiled:
            self._compiled[key] = torch.compile(ref.model)
        return self._compiled[key]


def _spec(s: EvalSettings, device: str, scratch: str | None) -> dict[str, Any]:
    lim = s.limits
    env = base_env(device)
    sandbox = SandboxSpec(
        isolation=s.sandbox if s.sandbox != "rlimits" else "rlimits",
        device="cpu" if device == "cpu" else "cuda",
        memory_mb=lim.memory_mb,
        cpu_seconds=lim.cpu_seconds,
        max_processes=lim.max_processes,
        max_open_files=lim.max_open_files,
        max_file_mb=lim.max_file_mb,
        scratch=scratch or "",
        env=env,
    )
    return {"sandbox": sandbox.to_json(), "rss_limit_mb": lim.memory_mb}


def _private_scratch() -> str:
    path = tempfile.mkdtemp(prefix="tf-scratch-")
    if os.getuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    os.chmod(path, 0o700)
    return path


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


if __name__ == "__main__":  # pragma: no cover - debugging aid
    sys.exit(0)
