"""One candidate's evaluation as the judge sees it: its state and its channel to the worker.

Covers: `CandidateRun` (problem, settings, device, worker session, reference, phase times, audit
records, notes, whether a kernel has run; `call` sends one request with its budget and turns
every way it can fail into a `Stop` with a verdict; `outputs` reads the worker's outputs into
the judge's memory) and `failure_verdict` (a worker's failure reply as a verdict).
Does not cover: what to ask and when (evaluator.py, gpu_timing.py), comparison (compare.py).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.reference import Reference
from tritonforge.evaluation.judge.session import Session, describe_exit
from tritonforge.evaluation.sandbox.protocol import Deadline, PeerClosed, ProtocolError
from tritonforge.types import Problem, Status, Verdict


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
    phases: dict[str, float] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)  # audit record of each trial
    notes: list[str] = field(default_factory=list)
    compiled: bool = False  # a kernel has launched (or, CUDA backend, the extension built and ran)
    armed: str = ""  # the audit's configuration as the worker reported it at load
    signatures: list[str] = field(default_factory=list)  # launch signature of each trial
    reference_work: float | None = None  # hybrid: the reference's compute work (judge/work.py)

    def call(
        self,
        msg: dict[str, Any],
        fds: list[int],
        budget: float,
        phase: str,
        total: float | None = None,
    ) -> tuple[dict[str, Any], list[int]]:
        """One request to the worker within `budget` seconds; the fds sent are closed here.
        `total` is the phase's whole budget as configured (what a timeout message names) when
        `budget` is what is left of it."""
        session, compiled = self.session, self.compiled
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

    def outputs(self, reply: dict[str, Any], fds: list[int]) -> Any:
        """The worker's outputs, copied once into the judge's memory on its device (where the
        expected outputs live, so the comparison runs there)."""
        try:
            return self.session.transport.outputs(reply, fds)
        except ProtocolError as exc:
            raise Stop(
                Verdict(
                    status=Status.REWARD_HACK,
                    rule="protocol_violation",
                    message=f"malformed outputs from the worker: {exc}",
                )
            ) from None


def failure_verdict(reply: dict[str, Any], phase: str, compiled: bool) -> Verdict:
    """The verdict for a worker reply with `ok` false."""
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
