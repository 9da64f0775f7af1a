"""The judge: evaluates one candidate against one problem and always returns a Verdict.

Covers: `Evaluator.evaluate` (static checks, reference in this trusted process, memory admission
on the device, the candidate in a fresh sandboxed worker, correctness trials with hidden seeds
and several input distributions, audit decisions, exclusive timing against the reference in the
device's timing process, plausibility) and `LocalBackend` (the async EvalBackend over an
Evaluator). Never raises for a bad candidate and never returns None; a broken reference or judge
bug is an `internal_error` verdict. Out of device memory: a problem that cannot fit the device's
budget even alone is `resource_limit` (with the bytes); a worker's out-of-memory error while
other evaluations held memory on the device, or the judge's own, is judged again alone once;
the judge's own a second time is `judge_fault` (or `resource_limit` when the reference itself
does not fit).
Does not cover: isolation (sandbox/isolation.py), the worker side (sandbox/worker.py), HTTP
(service/server.py), the per-device resources (resources.py).
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
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

import torch

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.admission import DoesNotFit, JudgeOutOfMemory, gib
from tritonforge.evaluation.judge.candidate import (
    CandidateRun,
    Stop,
    failure_verdict,
    judge_oom_verdict,
)
from tritonforge.evaluation.judge.checks import run_static
from tritonforge.evaluation.judge.compare import compare_to_reference, tf32_hint
from tritonforge.evaluation.judge.constant import constant_rule
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
from tritonforge.evaluation.judge.group_timing import TimingGroup
from tritonforge.evaluation.judge.notes import explain
from tritonforge.evaluation.judge.reference import (
    INIT_SEED,
    Case,
    ReferenceError,
    ReferenceStore,
    meta_footprint,
)
from tritonforge.evaluation.judge.replay import Captured, recipe_ops, replayed_audit, take_recipe
from tritonforge.evaluation.judge.replay import close as close_replayer
from tritonforge.evaluation.judge.replay import evidence as replay_evidence
from tritonforge.evaluation.judge.replies import AuditFacts, Failure, RunReply
from tritonforge.evaluation.judge.requests import Load, Run
from tritonforge.evaluation.judge.resources import DeviceResources
from tritonforge.evaluation.judge.session import Session
from tritonforge.evaluation.judge.transport import Transport
from tritonforge.evaluation.judge.work import custom_share, reference_work
from tritonforge.evaluation.judge.workerenv import (
    device_label,
    private_scratch,
    resolve_device,
    worker_spec,
)
from tritonforge.evaluation.sandbox.classify import is_device_oom
from tritonforge.evaluation.sandbox.protocol import map_tensors, pack
from tritonforge.logging_setup import get_logger
from tritonforge.types import Audit, Problem, Status, Verdict

log = get_logger("evaluation.judge")
CPU_UNTIMED = (
    "timing not measured: the CPU Triton interpreter checks correctness only; speedup is null"
)
CPU_TIMED = "timed on the CPU interpreter (time_on_cpu): says nothing about GPU speed"
NOT_REPLAYED = (
    "not replayed: CUDA C++ kernels are native code a trusted replay cannot load; correctness "
    "rests on the judge's comparisons, and the timing on the candidate's own process"
)
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
        self._work: dict[tuple[str, str], float] = {}  # hybrid: reference work (judge/work.py)
        self._lock = threading.Lock()
        self.sandbox_warnings: list[str] = []
        self.transport_stats: Counter[str] = Counter()  # "shared" or "memfd: <why>" per worker
        self.retries: Counter[str] = Counter()  # "worker_oom" / "judge_oom": judged again alone
        self._local = threading.local()  # .group: the TimingGroup of an evaluate_group thread

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
        if retry is not None:  # out of device memory with others on the device: once, alone
            self.retries[retry] += 1
            first = verdict.message.splitlines()[0][:300] if verdict.message else retry
            verdict, _ = self._attempt(problem, source, s, alone=True)
            verdict.notes.append(f"judged again alone on the device after: {first}")
        elif verdict.status is Status.JUDGE_FAULT and "too busy" in verdict.message:
            first = verdict.message  # the machine starved the worker (budget.py): once more
            verdict, _ = self._attempt(problem, source, s, alone=False)
            verdict.notes.append(
                f"judged twice: the first attempt was the evaluator's fault ({first})"
            )
        if memory:
            verdict.notes.append(f"device memory after the first attempt: {memory}")
        verdict.problem_id = problem.id
        verdict.mode = s.mode
        verdict.preset = s.preset
        changed = s.preset_overrides()
        if changed:
            verdict.notes.append(f"preset {s.preset} with other values for: {', '.join(changed)}")
        verdict.wall_seconds = round(time.monotonic() - t0, 3)
        verdict.correct = verdict.status is Status.CORRECT
        return verdict

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
        static = run_static(source, s.mode, s.backend, s.require_custom_kernel)
        if static.status is not None:
            return Verdict(
                status=static.status,
                rule=static.rule,
                message=static.message,
                phase="static",
                device=device_label(s),  # judged without running: the device it was meant for
            ), False
        device = resolve_device(s)
        if s.backend == "cuda" and device == "cpu":
            return Verdict(
                status=Status.INTERNAL_ERROR,
                message="the CUDA C++ backend needs a GPU; evaluate on device=cuda",
                phase="static",
                device=device,
            ), False
        progress.debug("reference: building the problem's model and inputs on %s", device)
        t = time.monotonic()
        ref = self.refs.reference(problem, device)
        judge: defaultdict[str, float] = defaultdict(float)  # its own: reference, first case
        spent = time.monotonic() - t
        if spent > 0.001:
            judge["reference"] = spent
        res = self.resources(device)
        plan = self._plan(problem, source or "", s)
        try:
            group = None if alone else getattr(self._local, "group", None)
            with (
                res.admitted(ref, lambda: self.case(judge, ref, *plan[0]), alone) as grant,
                group.member() if group is not None else nullcontext() as member,
            ):
                v, oom = self._admitted(
                    problem,
                    source or "",
                    s,
                    device,
                    ref,
                    plan,
                    grant.waited,
                    static.preimports,
                    judge,
                    member,
                )
                return v, oom and grant.crowded  # alone, the candidate's own doing: no retry
        except DoesNotFit as exc:
            fp = ref.footprint or meta_footprint(ref)
            return Verdict(
                status=Status.RESOURCE_LIMIT,
                phase="admission",
                device=device,
                message=f"the problem does not fit this device: {exc} (per evaluation: "
                f"{fp.describe()}, plus worker and judge copies)",
            ), False

    def _admitted(
        self,
        problem: Problem,
        source: str,
        s: EvalSettings,
        device: str,
        ref,
        plan,
        waited: float,
        preimports: list[str] | None = None,
        judge: defaultdict[str, float] | None = None,
        member: Any = None,
    ) -> tuple[Verdict, bool]:
        """The evaluation proper, with the device memory it needs reserved. `judge`: phases of
        the judge's own work so far (reference load, the first case when it measured the
        footprint); the phases of this run are added to it."""
        progress.debug("spawn: starting a sandboxed worker")
        scratch = None if s.sandbox != "rlimits" else private_scratch()
        spec = worker_spec(s, device, scratch)
        phases = judge if judge is not None else defaultdict(float)
        if waited > 0.001:
            phases["admission_wait"] = waited
        t = time.monotonic()
        server = self.server(device)  # started on first use: not a worker's spawn
        if time.monotonic() - t > 0.01:
            phases["fork_server_start"] = time.monotonic() - t
        t = time.monotonic()
        session = Session(server, spec, s.limits.output_bytes)
        session.transport = Transport(device, s.transport)
        phases["spawn"] = time.monotonic() - t
        run = CandidateRun(problem, source, s, device, session, ref, phases)
        run.timing_member = member  # group_timing.Member: timed with the rest of its group
        run.preimports = list(preimports or [])
        try:
            v = self._run(run, plan)
        except Stop as f:
            v = f.verdict
        finally:
            session.close()
            if run.replayer is not None:
                close_replayer(run.replayer)
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
        if run.waited > 0.001:
            phases["gate_wait"] = run.waited
        v.device = device
        v.notes = run.notes + [n for n in v.notes if n not in run.notes]  # sandbox warnings: always
        explain(v, run)
        v.stdout_tail = session.stdout.text()
        v.stderr_tail = session.stderr.text()
        v.phase_seconds = {k: round(x, 4) for k, x in phases.items()}
        if device == "cpu":
            v.notes.append(CPU_TIMED if s.time_on_cpu and v.runtime is not None else CPU_UNTIMED)
        return v, run.device_oom and v.status is Status.OUT_OF_RESOURCES

    def _load(self, run: CandidateRun, first: Case) -> Verdict | None:
        """Import the candidate and build ModelNew in the worker: a failure verdict, or None (the
        sandbox's notes join `run.notes`). The shared device buffers (sized for the `first`
        case) are offered with the request."""
        s, session = run.settings, run.session
        init_desc, init_fd = pack(run.ref.init_inputs)
        shared, shared_fds = session.transport.offer(first)
        req = Load(
            source=run.source,
            init_inputs=init_desc,
            init_seed=INIT_SEED,
            device="cpu" if run.device == "cpu" else "cuda:0",
            backend=s.backend,
            mode=s.mode,
            preimport=tuple(run.preimports),
            shared=shared,
        )
        t = time.monotonic()
        reply, extra = run.ask(req, [init_fd, *shared_fds], s.budgets.import_s, "import")
        for fd in extra:  # the worker attaches nothing to this reply
            os.close(fd)
        run.phases["import"] = time.monotonic() - t
        if isinstance(reply, Failure):
            return failure_verdict(reply, "import", False)
        run.phases["cuda_init"] = reply.cuda_init_s
        run.armed = reply.audit.integrity.armed
        tr = session.transport
        tr.accept(reply.shared)
        with self._lock:
            self.transport_stats["shared" if tr.active else f"memfd: {tr.reason}"] += 1
        run.notes += [f"sandbox: {reply.sandbox.user[:300] or 'unknown'}"] + [
            f"sandbox warning: {w[:300]}" for w in reply.sandbox.warnings
        ]
        run.notes += [n[:300] for n in reply.notes[:4]]
        return None

    def case(self, phases: defaultdict[str, float], ref: Any, seed: int, dist: str) -> Case:
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

    def _check_trial(
        self,
        run: CandidateRun,
        i: int,
        dist: str,
        reply: RunReply,
        outputs: Any,
        case: Case,
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
        audit, facts = reply.audit, reply.facts
        # the first trial's calls may do one-off work (autotuning, a weight layout): not compared
        history = run.signatures[1:] if i > 0 else None
        hack = check_integrity(run.armed, audit.integrity) or decide_audit(
            audit, facts, s, run.session.unsolicited, history
        )
        run.signatures.append(facts.signature)
        if hack:
            return Verdict(
                status=Status.REWARD_HACK, rule=hack[0], message=hack[1], phase=phase, **common
            )
        with judge_device(run.session.transport.device):
            status, mm, why = compare_to_reference(case, outputs, s, run.problem)
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
        hack = constant_rule(run.trace, run.ref, outputs, case.expected)
        if hack:
            return Verdict(
                status=Status.REWARD_HACK, rule=hack[0], message=hack[1], phase=phase, **common
            )
        mutated = list(facts.mutated)
        if mutated:
            msg = f"forward modified its input(s) {mutated} in place; inputs must be left unchanged"
            return Verdict(status=Status.INPUT_MUTATED, message=msg, phase="correctness", **common)
        return None

    def share(self, run: CandidateRun, case: Case, audit: AuditFacts) -> float | None:
        """Hybrid: the custom-kernel share of one trial by the worker's op shapes (its word: a
        minimum share may reject on it; the verdict's share comes from the replayed recipe,
        `_replayed_share`); the reference's own work is profiled once per problem and device,
        here in the judge."""
        if not audit.ops:
            return 1.0  # PyTorch computed nothing
        if run.settings.mode != "hybrid":
            return None  # strict rejects the compute anyway; no shapes were recorded
        shapes = [[o.name, [list(x) for x in o.shapes], list(o.dtypes), o.count]
                  for o in audit.op_shapes]  # fmt: skip
        if not shapes:
            return custom_share(shapes, self._work.get((run.problem.id, run.device)))
        return custom_share(shapes, self._reference_work(run, case))

    def _reference_work(self, run: CandidateRun, case: Case) -> float | None:
        """The reference's own compute work, profiled once per problem and device here."""
        key = (run.problem.id, run.device)
        if key not in self._work:
            began = time.monotonic()  # (a part of "check")
            with run.ref.lock, judge_device(run.device):
                inputs = [map_tensors(v, lambda t: t.clone()) for v in case.inputs]
                self._work[key] = reference_work(run.ref.model, inputs, run.device)
            run.phases["reference_profile"] += time.monotonic() - began
        return self._work.get(key)

    def _run(self, run: CandidateRun, plan: list[tuple[int, str]]) -> Verdict:
        s, session = run.settings, run.session
        progress.debug("import: loading the candidate")
        failed = self._load(run, self.case(run.phases, run.ref, *plan[0]))
        if failed is not None:
            return failed
        # the correctness budget is the candidate's own time over the trials after the first:
        # the judge's work between trials (reference outputs, comparison) is not charged to it,
        # nor the time the worker waited for a CPU on a busy machine (budget.py)
        correctness_left = s.budgets.correctness_s
        # one trial after the compile also records forward's work as a recipe (judge/replay.py)
        replayable = s.backend == "triton"
        recipe_at = 1 if len(plan) > 1 else 0
        captured: Captured | None = None
        try:  # the recipe's blob fd is closed however this ends (evidence closes it too)
            for i, (seed, dist) in enumerate(plan):
                phase = "compile" if i == 0 else "correctness"
                total = s.budgets.compile_s if i == 0 else s.budgets.correctness_s
                progress.debug("reference outputs: trial %d/%d (%s inputs)", i + 1, len(plan), dist)
                case = self.case(run.phases, run.ref, seed, dist)
                carry, carry_fds = session.transport.send(case)
                req = Run(
                    carry,
                    **audit_switches(last_trial=i == len(plan) - 1),
                    recipe=replayable and i == recipe_at,
                )
                progress.debug("%s: trial %d/%d", phase, i + 1, len(plan))
                t = time.monotonic()
                budget = total if i == 0 else max(0.1, correctness_left)
                waited, cpu_waited = run.waited, run.waited_s
                reply, fds = run.ask(req, carry_fds, budget, phase, total)
                spent = (
                    time.monotonic() - t - (run.waited - waited)
                )  # waits for the gate: not its time
                run.phases[phase] += spent
                if i > 0:  # nor its waits for a CPU
                    correctness_left -= spent - (run.waited_s - cpu_waited)
                # compiled: a kernel launched (the worker's word: it decides only between two
                # failures' rewards, never an acceptance); for the CUDA backend the extension built
                # at import and forward ran (its launches happen inside native code)
                audit = reply.audit
                run.compiled = run.compiled or audit.launches_ok > 0
                run.compiled = run.compiled or (s.backend == "cuda" and isinstance(reply, RunReply))
                if isinstance(reply, Failure):
                    for fd in fds:
                        os.close(fd)
                    v = failure_verdict(reply, phase, run.compiled)
                    v.trials_total, v.trials_passed = s.correctness_trials, i
                    return v
                if replayable and i == recipe_at:
                    captured = take_recipe(reply.recipe, fds)
                t = time.monotonic()
                outputs = run.outputs(reply.outputs, fds)
                # the judge's own look at the shared input buffer joins the worker's report
                seen = session.transport.mutated(case, carry.shared)
                if seen:
                    mutated = sorted(set(reply.facts.mutated) | set(seen))
                    reply = replace(reply, facts=replace(reply.facts, mutated=tuple(mutated)))
                audit = reclassify(reply.audit)  # the judge's glue list, not the worker's
                audit = replace(audit, custom_share=self.share(run, case, audit))
                reply = replace(reply, audit=audit)
                run.records.append(audit)
                stop = self._check_trial(run, i, dist, reply, outputs, case)
                run.phases["check"] += time.monotonic() - t
                if stop is not None:
                    if stop.status is Status.NUMERICAL_MISMATCH and run.device != "cpu":
                        stop.message += tf32_hint(run.source, case.expected)
                    return stop
                # one case at a time: this trial's inputs, expected and copied outputs go before the
                # next case is built (admission counts one; at 8 GiB a side, keeping the last trial's
                # through the timing filled the H200)
                del case, outputs
            n = len(plan)
            if replayable:  # the verdict rests on the replay, not on the candidate's process
                progress.debug("replay: the kernels alone, in a trusted replayer, on fresh inputs")
                replayer = replay_evidence(self, run, captured)
                run.session.close()  # the candidate's process is done with
                run.replayer, run.session = replayer, replayer.session
            else:
                run.notes.append(NOT_REPLAYED)
        finally:
            if captured is not None:
                captured.close()
        v = Verdict(
            status=Status.CORRECT,
            compiled=run.compiled,
            trials_total=n,
            trials_passed=n,
            audit=audit_record(run.records),
            notes=run.notes,
            message="all correctness trials passed",
        )
        if run.replayer is not None:  # what the verdict says ran: what the replay ran
            v.audit = replayed_audit(run.replayer.recipe, v.audit or Audit())
        if run.replayer is not None and s.mode == "hybrid":
            self._replayed_share(run, v, plan[0])
            if v.status is not Status.CORRECT:
                return v
        if s.measure_performance and (run.device != "cpu" or s.time_on_cpu):
            time_candidate(self, run, v, run.timing_member)
        return v

    def _replayed_share(self, run: CandidateRun, v: Verdict, first: tuple[int, str]) -> None:
        """Hybrid: the custom-kernel share from the replayed recipe's PyTorch ops (what the
        trusted replay ran, not what the worker reported), and the minimum-share rule on it."""
        ops = recipe_ops(run.replayer.recipe)
        share = 1.0 if not ops else None
        if ops:
            case = self.case(run.phases, run.ref, *first)
            share = custom_share(ops, self._reference_work(run, case))
        v.audit.custom_share, v.audit.share_basis = share, "work" if share is not None else None
        need = run.settings.min_custom_share
        if need > 0 and (share is None or share < need):
            v.status, v.rule, v.correct = Status.REWARD_HACK, "insufficient_custom_share", False
            v.message = (
                f"the replayed kernels did {0.0 if share is None else share:.0%} of the work; at "
                f"least {need:.0%} is required"
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
