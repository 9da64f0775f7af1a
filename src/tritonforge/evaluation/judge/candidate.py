"""One candidate's evaluation as the judge sees it: its state and its channel to the worker.

Covers: `CandidateRun` (problem, settings, device, worker session, reference, phase times, audit
records, notes, whether a kernel has run; `ask` sends one request (a record of requests.py,
turned into its wire form here only) with its budget, holding shared access of the device's
gate while the worker works (its budget starts once access is granted; the wait is added to
`waited`), parses the reply (replies.py) and turns every way it can fail into a `Stop` with a
verdict; `outputs` reads the worker's outputs into the judge's memory) and `failure_verdict` (a
worker's failure reply as a verdict; a device out-of-memory reply names the figures and sets
`device_oom`, also when the worker died of it outside a request it could answer) and
`judge_oom_verdict` (the judge's own out-of-memory error as a verdict).
Does not cover: what to ask and when (trials.py, replay.py, gpu_timing.py), comparison
(compare.py).
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge import replies
from tritonforge.evaluation.judge.admission import JudgeOutOfMemory, gib
from tritonforge.evaluation.judge.budget import LoadAwareBudget, Starved
from tritonforge.evaluation.judge.constant import OutputTrace
from tritonforge.evaluation.judge.device_gate import gate
from tritonforge.evaluation.judge.group_timing import Member
from tritonforge.evaluation.judge.reference import Reference
from tritonforge.evaluation.judge.requests import WorkerRequest
from tritonforge.evaluation.judge.session import Session, describe_exit
from tritonforge.evaluation.sandbox.protocol import Deadline, PeerClosed, ProtocolError
from tritonforge.evaluation.sandbox.recipe_format import Recipe
from tritonforge.types import Problem, Status, Verdict

# what a worker that died of device memory outside a guarded request leaves on stderr
_OOM_TAIL = re.compile(r"out of memory|NVML_SUCCESS|CUDA_ERROR_OUT_OF_MEMORY", re.IGNORECASE)


class Stop(Exception):
    """Stop evaluating with this verdict (raised anywhere inside one evaluation)."""

    def __init__(self, verdict: Verdict):
        super().__init__(verdict.status.value)
        self.verdict = verdict


@dataclass
class CandidateRun:
    """The judge's state for one candidate in one worker."""

    problem: Problem
    source: str
    settings: EvalSettings
    device: str
    session: Session
    ref: Reference
    # seconds per phase, the judge's and the worker's (a missing one counts 0: `+=` adds)
    phases: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    records: list[replies.AuditFacts] = field(default_factory=list)  # audit of each trial
    notes: list[str] = field(default_factory=list)
    compiled: bool = False  # a kernel has launched (or, CUDA backend, the extension built and ran)
    armed: str = ""  # the audit's configuration as the worker reported it at load
    signatures: list[str] = field(default_factory=list)  # launch signature of each trial
    preimports: list[str] = field(default_factory=list)  # Inductor runtime modules to import first
    waited_s: float = 0.0  # time the worker waited for a CPU, summed over requests
    device_oom: bool = False  # a request failed for lack of device memory
    waited: float = 0.0  # seconds spent waiting for the device's gate (not the candidate's time)
    trace: OutputTrace = field(default_factory=OutputTrace)  # outputs' fingerprints per trial
    replayer: CandidateRun | None = None  # the trusted replayer, once the replay passed
    recipe: Recipe | None = None  # a replayer's: the parsed recipe it runs
    scratch: str | None = None  # a replayer's private scratch directory (rlimits sandbox)
    timing_member: Member | None = None  # when judged with its group

    def ask(
        self,
        req: WorkerRequest,
        fds: list[int],
        budget: float,
        phase: str,
        total: float | None = None,
    ) -> tuple[Any, list[int]]:
        """One request to the worker within `budget` seconds of its own time (time it waited
        for a CPU does not count: budget.py), under shared access of the device (re-entrant
        inside a timing's exclusive access); the fds sent are closed here. `total` is the
        phase's whole budget as configured (what a timeout message names) when `budget` is what
        is left of it. The reply is parsed into its record (replies.py) or a `Failure`: one that
        does not parse is the candidate's tampering with its worker (`protocol_violation`),
        never an error of the judge's. Returns (record, fds)."""
        with gate(self.device).shared() as waited:
            self.waited += waited
            raw, rfds = self._call(req, fds, budget, phase, total)
        if not raw.get("ok") and isinstance(raw.get("memory"), dict):
            self.device_oom = True
        try:
            return replies.parse(req.op, raw), rfds
        except replies.ReplyError as exc:
            for fd in rfds:
                os.close(fd)
            raise Stop(
                Verdict(
                    status=Status.REWARD_HACK,
                    rule="protocol_violation",
                    phase=phase,
                    compiled=self.compiled,
                    message=f"the worker's reply to `{req.op}` is malformed: {exc}"[:2000],
                )
            ) from None

    def _call(
        self, req: WorkerRequest, fds: list[int], budget: float, phase: str, total: float | None
    ) -> tuple[dict[str, Any], list[int]]:
        """The transport call: the request's wire form sent, the raw reply (for `ask` only)."""
        session, compiled = self.session, self.compiled
        clock = LoadAwareBudget(session.pid, budget, self.settings.budgets.load_stretch)
        try:
            return session.request(req.wire(), fds, clock.deadline, clock.next_deadline)
        except Deadline:
            waited = (
                f" (not counting {clock.waited:.0f} s it waited for a CPU)"
                if clock.waited >= 1
                else ""
            )
            raise Stop(
                Verdict(
                    status=Status.TIMEOUT,
                    phase=phase,
                    compiled=compiled,
                    message=f"{phase} took longer than its {total or budget:g} s budget{waited}",
                )
            ) from None
        except Starved as exc:
            raise Stop(
                Verdict(
                    status=Status.JUDGE_FAULT,
                    phase=phase,
                    compiled=compiled,
                    message=f"{phase}: {exc}; the evaluator's fault, not the candidate's",
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
            if status == "crash" and _OOM_TAIL.search(session.stderr.text()):
                self.device_oom = True
                status = Status.OUT_OF_RESOURCES.value
                why = "the worker ran out of device memory and ended (see stderr)"
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
            self.waited_s += clock.waited
            for fd in fds:
                os.close(fd)

    def outputs(self, desc: dict[str, Any], fds: list[int]) -> Any:
        """The worker's outputs (`desc`: their descriptor), copied once into the judge's memory
        on its device (where the expected outputs live, so the comparison runs there)."""
        try:
            return self.session.transport.outputs(desc, fds)
        except ProtocolError as exc:
            raise Stop(
                Verdict(
                    status=Status.REWARD_HACK,
                    rule="protocol_violation",
                    message=f"malformed outputs from the worker: {exc}",
                )
            ) from None


def failure_verdict(reply: replies.Failure, phase: str, compiled: bool) -> Verdict:
    """The verdict for a worker's failure reply."""
    status = reply.status_enum()
    if reply.audit.violations:  # a blocked action raised: the violation, not the exception
        first = reply.audit.violations[0]
        return Verdict(
            status=Status.REWARD_HACK,
            rule=first.split(":", 1)[0],
            phase=phase,
            compiled=compiled,
            message=f"blocked: {first}",
        )
    if status is Status.CORRECT:
        status = Status.REWARD_HACK
    msg = reply.message[:8000]
    if reply.memory is not None:
        msg = f"{oom_figures(reply.memory)}\n{msg}"
    return Verdict(
        status=status,
        phase=(reply.phase or phase) if status is not Status.COMPILE_ERROR else "compile",
        compiled=compiled and status is not Status.COMPILE_ERROR,
        message=msg,
    )


def oom_figures(facts: dict[str, int]) -> str:
    """One line from a worker's out-of-memory figures (parsed: counts only)."""

    def num(name: str) -> int | None:
        return facts.get(name)

    parts = []
    if num("requested") is not None:
        parts.append(f"tried to allocate {gib(num('requested'))}")
    if num("allocated") is not None:
        held = f"this process held {gib(num('allocated'))}"
        if num("reserved") is not None:
            held += f" ({gib(num('reserved'))} reserved)"
        parts.append(held)
    if num("device_free") is not None and num("device_total") is not None:
        parts.append(f"device free {gib(num('device_free'))} of {gib(num('device_total'))}")
    return "out of device memory" + (": " + "; ".join(parts) if parts else "")


def judge_oom_verdict(exc: JudgeOutOfMemory, alone: bool) -> Verdict:
    """The judge ran out of device memory: the candidate is not at fault. Alone on the device,
    a reference that does not fit is the problem's `resource_limit`; anything else is the
    judge's fault."""
    if alone and exc.where.startswith(("building a case", "loading the reference")):
        return Verdict(
            status=Status.RESOURCE_LIMIT,
            phase="reference",
            message=f"the problem does not fit this device even alone: {exc}",
        )
    return Verdict(
        status=Status.JUDGE_FAULT,
        phase="judge",
        message=f"the judge ran out of device memory{' (alone on the device)' if alone else ''}: "
        f"{exc}; the candidate was not judged",
    )
