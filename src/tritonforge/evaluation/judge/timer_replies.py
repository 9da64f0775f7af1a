"""The device's trusted timing process's replies as the judge reads them (ref_timer.py).

Covers: `TimerDied` (the process ended, stopped answering or broke: the judge's problem, the
timing is tried again), `ReferenceUnusable` (the reference failed there), `context_lost` (a
failure telling of a broken CUDA context, after which every request would fail), `failed` (a
failed reply as its exception: out of device memory is the judge's, JudgeOutOfMemory) and
`parse_time` (a `time` reply as a replies.TimeReply record; one that does not parse is the
judge's fault). The process is trusted (our code only), so a reply is read, not distrusted;
the records are what leaves ref_timer.py.
Does not cover: the requests (requests.py, ref_timer.py), the candidates' replies (replies.py).
"""

from __future__ import annotations

from typing import Any

from tritonforge.evaluation.judge import replies
from tritonforge.evaluation.judge.admission import JudgeOutOfMemory
from tritonforge.evaluation.judge.replies import TimeReply


class TimerDied(Exception):
    """The timing process ended or stopped answering: the judge's problem, not the candidate's."""


class ReferenceUnusable(Exception):
    """The reference could not be loaded or run in the timing process (its message says why)."""


# CUDA errors after which a context is of no further use (the driver reports them on every call)
# (not "device-side assert" alone: torch appends "... to enable device-side assertions" to
# every CUDA error it raises)
STICKY = ("illegal memory access", "unspecified launch failure", "misaligned address",
          "illegal instruction", "device-side assert triggered", "hardware stack error")  # fmt: skip


def context_lost(reply: dict[str, Any]) -> bool:
    """A failed reply of the timing process telling of a broken CUDA context (out of memory,
    which the process reports with its figures, never is)."""
    if isinstance(reply.get("memory"), dict):
        return False
    message = str(reply.get("message", "")).lower()
    return reply.get("status") == "illegal_memory_access" or any(m in message for m in STICKY)


def parse_time(raw: dict[str, Any]) -> TimeReply:
    """The timing process's `time` reply as a record; one that does not parse is the judge's
    fault (TimerDied: the timing is tried again in a new process)."""
    try:
        reply = replies.parse("time", raw)
    except replies.ReplyError as exc:
        raise TimerDied(f"the timing process's reply does not parse: {exc}") from None
    if isinstance(reply, replies.Failure):  # (raised for failures already: `failed`)
        raise TimerDied(f"the timing process failed: {reply.message[:300]}")
    return reply


def failed(reply: dict[str, Any], what: str) -> None:
    """Raise for a failed reply: out of device memory is the judge's (JudgeOutOfMemory)."""
    if reply.get("ok"):
        return
    why = str(reply.get("message", ""))[:2000]
    if isinstance(reply.get("memory"), dict):
        raise JudgeOutOfMemory(what, RuntimeError(why))
    raise ReferenceUnusable(f"{what}: {reply.get('status', 'error')}: {why}")
