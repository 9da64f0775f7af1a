"""Memory admission per device: evaluations run concurrently only while they fit a byte budget.

Covers: `Footprint` (a problem's device bytes: inputs, outputs, the reference's workspace and
weights, measured once when its first case is built), `evaluation_bytes` (what one candidate's
evaluation may hold on the device: its worker's context, L2 flush buffer, weights, input and
output copies and workspace, plus the judge's shared buffers, output copy and comparison
temporaries, plus the problem's entry in the timing process), and `DeviceBudget` (reservations
granted while resident caches + reservations fit the capacity; caches are trimmed to make room;
`alone=True` waits until nothing else is reserved and keeps everything else out, for retries
after an out-of-memory error; a `Grant` says whether another reservation was held meanwhile).
A request larger than the capacity less what cannot be evicted raises `DoesNotFit` with the
figures (a `resource_limit` verdict).

The order of grants (FIFO with backfill). Requests queue in arrival order; the head of the
queue is granted as soon as it fits. A request behind a head that does not fit yet may be
granted first (a *backfill*) only when all of these hold:
- neither it nor the head is `alone` (an `alone` head needs everything: nothing passes it);
- the head still waits for a holder that was there when it became the head (once only
  backfilled grants stand between the head and its turn, no further backfill starts);
- it fits now (resident caches, trimmed if need be, + reservations + it <= capacity);
- it cannot delay the head: the bytes of the backfills granted since the head became the head
  and still held, + this request + the head's need <= capacity - pinned bytes. So when the
  holders the head waited for finish, the head fits (caches can be trimmed to the pinned bytes).
Among requests that may be backfilled, an earlier one goes first. The head waits for the
holders it found and, where memory that cannot be trimmed at once (a reference pinned in the
timing process, a trim skipped while that process is busy) keeps resident bytes above the
pinned floor, for backfills granted meanwhile; no new backfill starts once only backfills stand
in its way, so the wait stays bounded.
Across processes (`host`, host_ledger.HostLedger: several judging processes on one GPU), the
outer layer: a grant also needs room next to what the other live processes hold (their
reservations and resident bytes, published in the ledger), is written to the ledger in the same
session that checks it, and yields to another process's head that has waited longer and would
no longer fit (this process then trims its caches for it); a process's heads publish what they
wait for, and a watch thread of each process publishes its resident bytes every second and trims
its caches when another process's head waits for their room (an idle judge does too). Another process's bytes are never a reason for `DoesNotFit` unless they cannot be
evicted (its pinned bytes).
Does not cover: measuring footprints (reference.py), who calls it (evaluator.py), the order
in which a batch submits its jobs (evaluation/batch_order.py), the service queue
(service/service.py).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tritonforge.evaluation.judge.compare import CHUNK
from tritonforge.evaluation.judge.host_ledger import HostLedger, LedgerView, Others
from tritonforge.logging_setup import get_logger

log = get_logger("evaluation.admission")

GIB = 1 << 30
L2_FLUSH_BYTES = 256 << 20  # each timing process's flush buffer (sandbox/timing_loop.py)
SLACK = 1.15  # caching-allocator rounding and fragmentation
# compare.py works chunk by chunk (compare.CHUNK elements): its temporaries (differences,
# masks, scores; fp64 at worst) are at most this many bytes per element of a chunk
COMPARE_BYTES_PER_ELEMENT = 64


def compare_bytes(outputs: int) -> int:
    """Device bytes of the comparison's temporaries for outputs of `outputs` bytes."""
    return min(4 * outputs, COMPARE_BYTES_PER_ELEMENT * CHUNK)


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


@dataclass(frozen=True)
class Footprint:
    """Device bytes of one problem (one case); `measured` when from the allocator's peak."""

    inputs: int
    outputs: int
    workspace: int = 0  # peak allocated while the reference ran, beyond its input copy and outputs
    weights: int = 0
    measured: bool = False

    def describe(self) -> str:
        return (
            f"inputs {gib(self.inputs)}, outputs {gib(self.outputs)}, reference workspace "
            f"{gib(self.workspace)}, weights {gib(self.weights)}"
        )


def timer_entry_bytes(fp: Footprint) -> int:
    """What the problem costs the device's timing process while loaded (model, inputs, a run)."""
    return fp.weights + fp.inputs + fp.outputs + fp.workspace


def evaluation_bytes(fp: Footprint, worker_context: int) -> int:
    """Device bytes one candidate's evaluation may hold at its peak."""
    # worker: context, flush buffer, its weights, a clean copy of the inputs (mutation check) and
    # one more (memfd path / timing copy), outputs twice (the caching check keeps the first
    # call's), the workspace its forward needs (the reference's is the estimate)
    worker = worker_context + L2_FLUSH_BYTES + fp.weights + 2 * fp.inputs + 2 * fp.outputs
    worker += fp.workspace
    # judge: the shared input/output buffers, the case in use (packed inputs, expected outputs),
    # the copy of the worker's outputs and the comparison's temporaries
    judge = 2 * fp.inputs + 3 * fp.outputs + compare_bytes(fp.outputs)
    return int((worker + judge + timer_entry_bytes(fp)) * SLACK)


def case_build_bytes(fp: Footprint) -> int:
    """What building a problem's first case may hold in the judge: inputs drawn, the reference's
    copy of them, its outputs and workspace, the packed copy of the inputs, and the determinism
    check's second run compared with the first (problem_check.py)."""
    outs = 3 * fp.outputs + compare_bytes(fp.outputs)
    return int((3 * fp.inputs + outs + fp.workspace) * SLACK)


class JudgeOutOfMemory(Exception):
    """The judge process itself ran out of device memory: not the candidate's fault."""

    def __init__(self, where: str, cause: BaseException):
        self.where, self.cause = where, cause
        super().__init__(f"out of device memory while {where}: {str(cause)[:600]}")


class DoesNotFit(Exception):
    """The request cannot fit the device's budget even with nothing else running."""

    def __init__(self, needed: int, available: int, capacity: int, device: str):
        self.needed, self.available, self.capacity, self.device = (
            needed,
            available,
            capacity,
            device,
        )
        super().__init__(
            f"needs {gib(needed)} of device memory on {device}; the budget is {gib(capacity)}, "
            f"of which {gib(available)} is available with nothing else running"
        )


@dataclass
class Grant:
    """A reservation being held: how long it waited, and whether it shared the device."""

    waited: float
    ticket: int
    budget: DeviceBudget

    @property
    def crowded(self) -> bool:
        """Another evaluation held a reservation on the device at some time during this one."""
        return self.budget.crowded(self.ticket)


class DeviceBudget:
    """Byte reservations on one device, granted in arrival order while they fit, with backfill
    (the module's docstring gives the rule; `backfill=False`: strictly first come, first served).

    `resident()` gives the bytes caches hold now (evictable), `pinned()` what cannot be evicted,
    `trim(target)` evicts caches down to `target` resident bytes (best effort). All three are
    called without this budget's lock held.
    """

    def __init__(
        self,
        device: str,
        capacity: int,
        resident: Callable[[], int] = lambda: 0,
        pinned: Callable[[], int] = lambda: 0,
        trim: Callable[[int], None] = lambda target: None,
        poll_s: float = 0.25,
        backfill: bool = True,
        stuck_s: float = 20.0,
        host: HostLedger | None = None,
    ):
        self.device, self.capacity, self.backfill = device, capacity, backfill
        self.host = host  # the other processes on this device (None: this process only)
        self.stuck_s = stuck_s  # how long caches may stay over a lone head before DoesNotFit
        self._stuck: dict[int, float] = {}  # head ticket -> when trimming first fell short alone
        self._resident, self._pinned, self._trim = resident, pinned, trim
        self._cond = threading.Condition()
        self._queue: deque[int] = deque()
        self._want: dict[int, tuple[int, bool]] = {}  # queued ticket -> (bytes, alone)
        self._tickets = 0
        self._held: dict[int, int] = {}  # ticket -> bytes
        self._crowded: set[int] = set()  # held tickets that have shared the device
        self._blockers: set[int] = set()  # held when the head became the head, still held
        self._backfilled: dict[int, int] = {}  # backfills since the head became the head, held
        self.poll_s = poll_s
        self.peak_reserved = 0
        self.granted = 0
        self.backfills = 0
        self.trims = 0
        self._closed = threading.Event()
        if host is not None:  # keep the ledger fresh and give room to other processes' heads
            threading.Thread(target=self._watch, name=f"ledger-{device}", daemon=True).start()

    @property
    def reserved(self) -> int:
        with self._cond:
            return sum(self._held.values())

    @contextmanager
    def _ledger(self, usage: tuple[int, int] | None = None) -> Iterator[LedgerView | None]:
        """A session of the host ledger (None without one), this process's (resident, pinned)
        bytes published first (`usage`, measured by the caller without a lock held)."""
        if self.host is None:
            yield None
            return
        with self.host.session() as view:
            if usage is not None:
                view.resident(*usage)
            yield view

    def _usage(self) -> tuple[int, int] | None:
        """(resident, pinned) bytes of this process, for the ledger (call without the lock)."""
        return (self._resident(), self._pinned()) if self.host is not None else None

    def close(self) -> None:
        """Stop the ledger watch (the process's entry goes when the process does)."""
        self._closed.set()

    def _watch(self, period_s: float = 1.0) -> None:
        """While this process lives: publish its resident bytes every `period_s`, and when
        another process's head waits for room that this process's caches hold, trim them
        (an idle judge keeps no cache another process needs)."""
        while not self._closed.wait(period_s):
            try:
                ext = self._others()
                need = max((b for b, _ in ext.waiting), default=0)
                held = self.reserved
                if need and self._resident() + held + ext.total + need > self.capacity:
                    self._trim(max(0, self.capacity - held - ext.total - need))
                    self.trims += 1
            except Exception as exc:  # a bad moment of the ledger must not end the watch
                log.warning("ledger watch of %s: %s", self.device, exc)

    def _others(self) -> Others:
        """The other processes' bytes on this device (none without a ledger)."""
        if self.host is None:
            return Others()
        with self._ledger(self._usage()) as view:
            return view.others() if view is not None else Others()

    @contextmanager
    def reserve(self, nbytes: int, alone: bool = False) -> Iterator[Grant]:
        """Hold `nbytes` (with `alone`, everything); yields the Grant."""
        floor = self._pinned() + self._others().pinned
        if nbytes > self.capacity - floor:
            raise DoesNotFit(nbytes, self.capacity - floor, self.capacity, self.device)
        t0 = time.monotonic()
        with self._cond:
            ticket = self._tickets
            self._tickets += 1
            self._queue.append(ticket)
            self._want[ticket] = (nbytes, alone)
            if len(self._queue) == 1:
                self._new_head()
        try:
            self._wait_turn(ticket, nbytes, alone, time.time())
        except BaseException:
            with self._cond:
                was_head = self._queue[0] == ticket
                self._queue.remove(ticket)
                del self._want[ticket]
                self._stuck.pop(ticket, None)
                if was_head:
                    self._new_head()
                self._cond.notify_all()
            if was_head:
                with self._ledger() as view:
                    if view is not None:
                        view.waiting(None)
            raise
        grant = Grant(time.monotonic() - t0, ticket, self)
        try:
            yield grant
        finally:
            with self._cond:
                del self._held[ticket]
                self._crowded.discard(ticket)
                self._blockers.discard(ticket)
                self._backfilled.pop(ticket, None)
                self._cond.notify_all()
            with self._ledger(self._usage()) as view:
                if view is not None:
                    view.drop(ticket)

    def crowded(self, ticket: int) -> bool:
        """Another reservation was held at some time while `ticket` was."""
        with self._cond:
            return ticket in self._crowded

    def _new_head(self) -> None:
        """The queue's head changed (call with the lock held): what it waits for is what is
        held now; no backfill has been granted on its account yet."""
        self._blockers = set(self._held)
        self._backfilled = {}

    def _grant(self, ticket: int, want: int) -> None:
        """Hold `want` bytes for `ticket`, taken out of the queue (call with the lock held)."""
        self._held[ticket] = want
        del self._want[ticket]
        self._stuck.pop(ticket, None)
        was_head = self._queue[0] == ticket
        self._queue.remove(ticket)
        if was_head:
            self._new_head()
        if len(self._held) > 1:  # everyone holding now shares the device
            self._crowded.update(self._held)
        self.granted += 1
        self.peak_reserved = max(self.peak_reserved, sum(self._held.values()))
        self._cond.notify_all()

    def _wait_turn(self, ticket: int, nbytes: int, alone: bool, since: float) -> None:
        while True:
            floor = self._pinned()
            ext = self._others()
            with self._cond:
                head = self._queue[0] == ticket
                others = sum(self._held.values())
                may_backfill = not head and self._may_backfill(ticket, floor, ext.total)
            if head and not (alone and others):
                want = self.capacity - floor - ext.pinned if alone else nbytes
                if self._try_grant(ticket, want, others, alone, since):
                    return
            elif may_backfill and self._try_backfill(ticket, nbytes, floor, since):
                return
            with self._cond:
                self._cond.wait(self.poll_s)

    def _try_grant(self, ticket: int, want: int, others: int, alone: bool, since: float) -> bool:
        """The head's turn: trim caches to make room, grant when it fits (next to the other
        processes' bytes, and leaving room for another process's head that waited longer)."""
        ext = self._others()
        if self._resident() + others + ext.total + want > self.capacity:
            self._trim(max(0, self.capacity - others - ext.total - want))  # evict caches
            self.trims += 1
        resident, usage = self._resident(), self._usage()
        with self._cond, self._ledger(usage) as view:
            ext = view.others() if view is not None else Others()
            others = sum(self._held.values())  # a backfill may have been granted meanwhile
            need = resident + others + ext.total + want
            earlier = ext.ahead(since)
            yields = earlier > 0 and need + earlier > self.capacity
            nobody = others + ext.reserved == 0  # no reservation held anywhere
            if not yields and (need <= self.capacity or (alone and nobody)):
                if view is not None:
                    view.hold(ticket, want)
                    view.waiting(None)
                self._grant(ticket, want)
                return True
            if view is not None:
                view.waiting(want, since)
        if yields:  # another process's head goes first: make room for it
            self._trim(max(0, self.capacity - others - ext.total - earlier))
        elif nobody:  # no reservation to wait for, but caches over this
            # head's need: they may be held for a moment (a trim skipped while the timing
            # process answers another thread, a model still referenced by an evaluation that
            # just ended): try again for `stuck_s` before saying it does not fit
            first = self._stuck.setdefault(ticket, time.monotonic())
            if time.monotonic() - first >= self.stuck_s:
                self._stuck.pop(ticket, None)
                raise DoesNotFit(want, self.capacity - resident, self.capacity, self.device)
        return False

    def _backfillable(self, ticket: int, floor: int, external: int) -> bool:
        """`ticket` (queued behind the head) may pass it now, caches trimmed (lock held)."""
        nbytes, alone = self._want[ticket]
        need, head_alone = self._want[self._queue[0]]
        if alone or head_alone or not self._blockers:
            return False
        room = self.capacity - floor
        fits_now = sum(self._held.values()) + external + nbytes <= room
        return fits_now and sum(self._backfilled.values()) + nbytes + need <= room

    def _may_backfill(self, ticket: int, floor: int, external: int) -> bool:
        """`ticket` may be backfilled and no request ahead of it (behind the head) may (lock held)."""
        if not self.backfill or not self._backfillable(ticket, floor, external):
            return False
        for earlier in self._queue:
            if earlier == ticket:
                return True
            if earlier != self._queue[0] and self._backfillable(earlier, floor, external):
                return False
        return False

    def _try_backfill(self, ticket: int, nbytes: int, floor: int, since: float) -> bool:
        """Pass the head: trim caches if need be, grant if the rule still holds."""
        others = self.reserved
        ext = self._others()
        if self._resident() + others + ext.total + nbytes > self.capacity:
            self._trim(max(0, self.capacity - others - ext.total - nbytes))
            self.trims += 1
        resident, usage = self._resident(), self._usage()
        with self._cond, self._ledger(usage) as view:
            ext = view.others() if view is not None else Others()
            if not self._may_backfill(ticket, floor, ext.total):
                return False
            need = resident + sum(self._held.values()) + ext.total + nbytes
            earlier = ext.ahead(since)
            if need > self.capacity or (earlier and need + earlier > self.capacity):
                return False
            if view is not None:
                view.hold(ticket, nbytes)
            self._backfilled[ticket] = nbytes
            self._grant(ticket, nbytes)
            self.backfills += 1
            return True
