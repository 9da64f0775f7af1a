"""The judge's handle of a device's trusted timing process, where references are timed.

Covers: `RefTimer`, one per device: a long-lived worker forked by the device's fork server into
the candidates' sandbox (the same process kind as a candidate's worker, single-threaded, the
same timing code: sandbox/timing_loop.py), which loads references (`prepare`: model, optional
torch.compile, the timing case's inputs, first calls) and times them on request (`time`). Loaded
references are kept least recently used first, bounded in count and bytes; their device bytes
(`resident`, `base_bytes`) count against the device's memory budget and `trim` gives them back.
A reference is pinned from `prepare` until `release`: evaluations prepare
under the device's shared gate and time later under its exclusive one, so another evaluation's
`prepare` or a `trim` in between must not evict it (pinned entries are never dropped).
If the process dies or stops answering, or answers that its CUDA context broke (`context_lost`:
an illegal memory access and the like, which every later request would meet again), `TimerDied`
is raised, the process is forgotten (ended) and the next request starts a fresh one (the caller
times the candidate again: nothing is lost).
One request at a time (`lock`); callers hold the device's gate first (device_gate.py).
Does not cover: when to time (gpu_timing.py), the worker side (sandbox/reference_host.py).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable
from typing import Any

from tritonforge.evaluation.judge.admission import (
    L2_FLUSH_BYTES,
    JudgeOutOfMemory,
    timer_entry_bytes,
)
from tritonforge.evaluation.judge.forkserver import ForkServer
from tritonforge.evaluation.judge.reference import INIT_SEED, Case, Reference
from tritonforge.evaluation.judge.replies import TimeReply
from tritonforge.evaluation.judge.requests import RefDrop, RefLoad, RefTime, TimerRequest
from tritonforge.evaluation.judge.session import Session, describe_exit
from tritonforge.evaluation.judge.timer_replies import TimerDied, context_lost, failed, parse_time
from tritonforge.evaluation.judge.timer_weights import offer
from tritonforge.evaluation.judge.transport import Parcel, export_inputs, shared_parcel
from tritonforge.evaluation.sandbox.devshare import DevShareError
from tritonforge.evaluation.sandbox.protocol import ProtocolError, pack
from tritonforge.logging_setup import get_logger

log = get_logger("evaluation.ref_timer")
MAX_ENTRIES = 8
TIMER_CPU_SECONDS = 10**7  # trusted and long-lived: the candidates' CPU-time cap does not apply


def timer_key(ref: Reference) -> str:
    """Which loaded reference: the problem and its exact source."""
    digest = hashlib.sha256(ref.problem.reference_src.encode()).hexdigest()[:16]
    return f"{ref.problem.id}:{digest}"


class RefTimer:
    """One device's trusted timing process (started on first use, restarted after a death)."""

    def __init__(
        self,
        device: str,
        server: Callable[[], ForkServer],
        spec: Callable[[], dict[str, Any]],
        context_bytes: int,
        max_bytes: int,
        max_entries: int = MAX_ENTRIES,
    ):
        self.device = device
        self._server, self._spec = server, spec
        self.context_bytes = context_bytes
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self.lock = threading.Lock()
        self.session: Session | None = None
        self.entries: OrderedDict[str, int] = OrderedDict()  # key -> device bytes, LRU first
        self.compiled: set[str] = set()
        self.pins: Counter[str] = Counter()  # key -> evaluations between prepare and release
        self.cases: dict[str, str] = {}  # key -> ident of the case its timing inputs came from
        self.sharing = device != "cpu"  # inputs through shared device buffers (else memfds)
        self.starts = 0
        self.deaths = 0
        self.weights: Counter[str] = Counter()  # how loads got their weights: judge, built

    # -- accounting -----------------------------------------------------------------------------
    def base_bytes(self) -> int:
        """Device bytes of the process itself while it runs (context, L2 flush buffer)."""
        if self.session is None or self.device == "cpu":
            return 0
        return self.context_bytes + L2_FLUSH_BYTES

    def entry_bytes(self) -> int:
        """Device bytes of the loaded references (read without the lock: admission polls it)."""
        return sum(list(self.entries.values()))

    @property
    def pid(self) -> int | None:
        return self.session.pid if self.session is not None else None

    # -- requests -------------------------------------------------------------------------------
    def _ensure(self) -> Session:
        if self.session is None:
            spec = self._spec()
            spec["sandbox"]["cpu_seconds"] = TIMER_CPU_SECONDS
            try:
                self.session = Session(self._server(), spec, 16384)
            except (RuntimeError, OSError) as exc:
                raise TimerDied(f"the reference timing process did not start: {exc}") from None
            self.entries.clear()
            self.cases.clear()
            self.compiled.clear()
            self.starts += 1
        return self.session

    def _request(
        self, req: TimerRequest, budget: float, parcel: Parcel | None = None
    ) -> dict[str, Any]:
        """The transport call: `req`'s wire form with what `parcel` adds (its fields and fds,
        closed here); the raw reply, read in this module only."""
        fds = parcel.fds if parcel is not None else []
        try:  # (the descriptors are closed also when the process cannot be started)
            session = self._ensure()
            msg = {**req.wire(), **(parcel.msg if parcel is not None else {})}
            reply, extra = session.request(msg, fds, time.monotonic() + budget)
        except ProtocolError as exc:  # PeerClosed, Deadline, a malformed frame
            ended = self._forget(f"{type(exc).__name__}: {exc}")
            how = f"; it ended: {ended}" if ended else ""
            raise TimerDied(
                f"the reference timing process stopped answering ({exc}){how}"
            ) from None
        finally:
            for fd in fds:
                os.close(fd)
        for fd in extra:
            os.close(fd)
        return reply

    def _forget(self, why: str) -> str:
        """Drop the process; returns how it ended ("" if unknown), e.g. killed by the
        resident-memory watchdog."""
        ended = ""
        if self.session is not None:
            self.deaths += 1
            ex = self.session.close(wait_s=5.0)
            ended = describe_exit(ex)[1] if ex is not None else ""
            log.warning("reference timing process on %s lost: %s (%s)", self.device, why, ended)
        self.session = None
        self.entries.clear()
        self.cases.clear()
        self.compiled.clear()
        return ended

    def prepare(
        self,
        ref: Reference,
        case: Case,
        compile_baseline: bool,
        budget: float,
        phases: defaultdict[str, float] | None = None,
    ) -> str:
        """Load `ref` (and its compiled version if asked) with `case` as its timing inputs,
        unless already loaded with that case; returns its key. Raises TimerDied,
        ReferenceUnusable or JudgeOutOfMemory. `phases` gets the seconds of a load's parts:
        `timer_send` (the weights and inputs handed over: device-to-device copies into shared
        buffers, or host memfds), `timer_build`, `timer_inputs` (mapped in the process), `timer_calls`."""
        key = timer_key(ref)
        with self.lock:
            loaded = key in self.entries and self.cases.get(key) == case.ident
            if loaded and (key in self.compiled or not compile_baseline):
                self.entries.move_to_end(key)
                self.pins[key] += 1
                return key
            need = timer_entry_bytes(ref.footprint) if ref.footprint else 0
            self._drop(key)
            while (
                len(self.entries) >= self.max_entries or self.entry_bytes() + need > self.max_bytes
            ):
                if not self._drop_oldest():
                    break  # every loaded reference is in use: admission has counted them
            reply = self._load(ref, case, compile_baseline, budget, phases)
            self._check(reply, "loading the reference in the timing process")
            if phases is not None:
                for part, x in (reply.get("seconds") or {}).items():
                    if isinstance(x, (int, float)) and part in ("build", "inputs", "calls"):
                        phases[f"timer_{part}"] += float(x)
            self.entries[key] = need
            self.cases[key] = case.ident
            self.pins[key] += 1
            if compile_baseline:
                self.compiled.add(key)
            return key

    def _load(
        self,
        ref: Reference,
        case: Case,
        compile_baseline: bool,
        budget: float,
        phases: defaultdict[str, float] | None,
    ) -> dict[str, Any]:
        """The `ref_load` request (caller holds the lock): the init inputs, the judge's weights
        (timer_weights.py: the process need not build them again) and the case's inputs."""
        init_desc, init_fd = pack(ref.init_inputs)
        device = "cpu" if self.device == "cpu" else "cuda:0"
        req = RefLoad(timer_key(ref), ref.problem.reference_src, init_desc, INIT_SEED, device,
                      compile_baseline, case.desc, case.ident)  # fmt: skip

        def lead() -> Parcel:
            first = Parcel({}, [os.dup(init_fd)])
            try:
                return first.add(self._shared(lambda s: offer(ref.model, self.device, s)))
            except BaseException:
                first.discard(self.device)
                raise

        try:
            reply = self._with_inputs(req, case, budget, lead, phases)
        finally:
            os.close(init_fd)
        how = str(reply.get("weights") or "")
        if how:
            self.weights[how.split(":")[0]] += 1
        return reply

    def _with_inputs(
        self,
        req: RefLoad | RefTime,
        case: Case,
        budget: float,
        lead: Callable[[], Parcel] = Parcel,
        phases: defaultdict[str, float] | None = None,
    ) -> dict[str, Any]:
        """`req` sent with what `lead()` makes first, then `case`'s inputs (caller holds the
        lock): through shared device buffers (the judge's side released once the process
        answered) or memfds; once more through memfds when the process could not map a buffer
        (it answers `shared_error`)."""
        for _ in range(2):
            t = time.monotonic()
            parcel = lead()
            try:
                parcel.add(self._carry(case))
            except BaseException:
                parcel.discard(self.device)
                raise
            if phases is not None:
                phases["timer_send"] += time.monotonic() - t
            try:
                reply = self._request(req, budget, parcel)
            finally:
                parcel.release(self.device)  # the process mapped them (or failed to)
            if not reply.get("shared_error"):
                return reply
            self._no_sharing(str(reply["shared_error"]))
        return reply

    def _carry(self, case: Case) -> Parcel:
        """How `case`'s inputs reach the process: a shared device buffer filled by one
        device-to-device copy (kept by the process as its timing inputs), else the case's memfd
        (a device-to-host copy here, host-to-device there: seconds for a 16 GiB input)."""
        if case.packed is not None and case.desc["size"] > 0:
            parcel = self._shared(lambda s: _shared_inputs(self.device, case) if s else Parcel())
            if parcel.buffers:
                return parcel
        return Parcel({}, [os.dup(case.fd)])

    def _shared(self, make: Callable[[bool], Parcel]) -> Parcel:
        """`make(shared)`, with shared device buffers while they work on this device: a buffer
        that cannot be made turns sharing off (memfds from then on), unless the device is out of
        memory (the judge's problem: JudgeOutOfMemory)."""
        if self.sharing:
            try:
                return make(True)
            except DevShareError as exc:
                if "OUT_OF_MEMORY" in str(exc):
                    raise JudgeOutOfMemory("sharing tensors with the timing process", exc) from exc
                self._no_sharing(str(exc))
        return make(False)

    def _no_sharing(self, why: str) -> None:
        if self.sharing:
            log.warning("timing process on %s: inputs through host memfds (%s)", self.device, why)
        self.sharing = False

    def release(self, key: str) -> None:
        """The evaluation that prepared `key` is done timing it: it may be evicted again."""
        with self.lock:
            self.pins[key] -= 1
            if self.pins[key] <= 0:
                del self.pins[key]

    def time(
        self,
        key: str,
        compiled: bool,
        case: Case,
        counts: tuple[int, int, float],
        clock: str,
        budget: float,
    ) -> TimeReply:
        """One timing request for a loaded reference (eager or compiled); the reply, parsed
        (`parse_time`). The inputs are those `prepare` loaded, unless another evaluation's
        `prepare` has since loaded this reference with another case (a rebuilt one: the case
        cache had evicted it): then this case's inputs go with the request, in place of the
        other's."""
        with self.lock:
            if key not in self.entries:  # the process was ended (and forgotten) since `prepare`
                raise TimerDied(f"the timing process was restarted after {key} was loaded")
            req = RefTime(key, compiled, case.desc, case.ident, counts[0], counts[1], counts[2],
                          clock)  # fmt: skip
            if key in self.entries and self.cases.get(key) != case.ident:
                self._request(RefDrop(key, inputs_only=True), 30.0)
                self.cases.pop(key, None)  # (the other's inputs are gone before these come)
                reply = self._with_inputs(req, case, budget)
            else:
                reply = self._request(req, budget)
            self._check(reply, "timing the reference")
            self.cases[key] = case.ident
        return parse_time(reply)

    def _check(self, reply: dict[str, Any], what: str) -> None:
        """`_check`, but a reply telling of a broken CUDA context ends the process first (the
        caller holds the lock): every later request would fail the same way, so it raises
        TimerDied (the timing is tried once more, in a new process)."""
        if not reply.get("ok") and context_lost(reply):
            why = f"{reply.get('status', 'error')}: {str(reply.get('message', ''))[:300]}"
            self._forget(f"{what}: {why}")
            raise TimerDied(f"{what}: its CUDA context broke ({why}); the process was ended")
        failed(reply, what)

    def _drop_oldest(self) -> bool:
        """Drop the least recently used reference not in use; False when there is none."""
        key = next((k for k in self.entries if not self.pins[k]), None)
        if key is None:
            return False
        self._drop(key)
        return True

    def _drop(self, key: str) -> None:
        """Forget a loaded reference (caller holds the lock)."""
        if key not in self.entries or self.session is None:
            return
        self.entries.pop(key)
        self.cases.pop(key, None)
        self.compiled.discard(key)
        try:
            self._request(RefDrop(key), 30.0)
        except TimerDied:
            pass

    def trim(self, target: int) -> None:
        """Drop loaded references until they hold <= `target` bytes; skipped while busy."""
        if not self.lock.acquire(blocking=False):
            return
        try:
            while self.entry_bytes() > target and self._drop_oldest():
                pass
        finally:
            self.lock.release()

    def close(self) -> None:
        with self.lock:
            if self.session is not None:
                self.session.close(wait_s=5.0)
            self.session = None
            self.entries.clear()
            self.cases.clear()
            self.compiled.clear()


def _shared_inputs(device: str, case: Case) -> Parcel:
    """`case`'s inputs in a new shared device buffer, which the process keeps as its inputs."""
    return shared_parcel(device, export_inputs(device, case), lambda sh: {"shared_inputs": sh})
