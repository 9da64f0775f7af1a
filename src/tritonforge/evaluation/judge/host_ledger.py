"""One device's memory ledger across every judging process of the host: who holds how many bytes.

Covers: `HostLedger`, the outer layer of a device's memory budget (admission.py) when several
processes judge on one GPU. A small JSON file (`ledger-<device key>.json` in the runtime
directory, host_share.py) lists, per live process (keyed by pid, with the token of its alive
lock), the bytes of its granted reservations (per ticket), what its caches, contexts and timing
process hold (`resident`, of which `pinned` cannot be evicted), and its waiting head (bytes and
since when). Every read and write happens in a `session`, under `LOCK_EX` on
`ledger-<key>.lock`; a session first drops the entries of processes that died (their alive lock
is free: host_share.alive), so a killed judge's bytes come back at the next session of anyone.
`Others` is what a session sees of the other processes. The decisions (fit, wait, yield to an
earlier waiter) are admission.py's.
Does not cover: in-process order and backfill (admission.py), the gate (host_gate.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonforge.evaluation.judge.host_share import alive, flocked, register
from tritonforge.logging_setup import get_logger

log = get_logger("evaluation.host_ledger")


@dataclass(frozen=True)
class Others:
    """The other live processes of one device, as a session sees them."""

    reserved: int = 0  # bytes of their granted reservations
    resident: int = 0  # bytes their caches, contexts and timing processes hold
    pinned: int = 0  # the part of `resident` they cannot evict
    waiting: tuple[tuple[int, float], ...] = ()  # (bytes, since) of their waiting heads

    @property
    def total(self) -> int:
        return self.reserved + self.resident

    def ahead(self, since: float) -> int:
        """The largest need of another process's head that has waited since before `since`."""
        return max((b for b, t in self.waiting if t < since), default=0)


@dataclass
class LedgerView:
    """The ledger inside one session: this process's entry and the others'."""

    pid: str
    procs: dict[str, dict[str, Any]]
    changed: bool = False
    reclaimed: list[str] = field(default_factory=list)

    @property
    def me(self) -> dict[str, Any]:
        return self.procs[self.pid]

    def others(self) -> Others:
        rest = [e for p, e in self.procs.items() if p != self.pid]
        waiting = tuple(tuple(e["waiting"]) for e in rest if e.get("waiting"))
        return Others(
            reserved=sum(sum(e["held"].values()) for e in rest),
            resident=sum(e["resident"] for e in rest),
            pinned=sum(e.get("pinned", 0) for e in rest),
            waiting=waiting,  # type: ignore[arg-type]
        )

    def _set(self, key: str, value: Any) -> None:
        if self.me.get(key) != value:
            self.me[key] = value
            self.changed = True

    def hold(self, ticket: int, nbytes: int) -> None:
        self.me["held"][str(ticket)] = int(nbytes)
        self.changed = True

    def drop(self, ticket: int) -> None:
        if self.me["held"].pop(str(ticket), None) is not None:
            self.changed = True

    def resident(self, nbytes: int, pinned: int) -> None:
        self._set("resident", int(nbytes))
        self._set("pinned", int(pinned))

    def waiting(self, nbytes: int | None, since: float = 0.0) -> None:
        self._set("waiting", None if nbytes is None else [int(nbytes), float(since)])


class HostLedger:
    """The byte ledger of one device in a runtime directory."""

    def __init__(self, directory: Path, key: str):
        self.directory, self.key = directory, key
        self.path = directory / f"ledger-{key}.json"
        self.lock = directory / f"ledger-{key}.lock"
        self.reclaimed = 0  # entries of dead processes this process dropped

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text())
            procs = data["procs"]
            assert isinstance(procs, dict)
            return procs
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, AssertionError, TypeError) as exc:
            log.warning("ledger %s unreadable (%s): starting it again", self.path, exc)
            return {}

    def _save(self, procs: dict[str, dict[str, Any]]) -> None:
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"procs": procs}, sort_keys=True))
        os.replace(tmp, self.path)

    @contextmanager
    def session(self) -> Iterator[LedgerView]:
        """The ledger under its lock, dead processes' entries dropped; written back if changed."""
        pid, token = register(self.directory)
        with flocked(self.lock):
            procs = self._load()
            view = LedgerView(str(pid), procs)
            for p in list(procs):
                entry = procs[p]
                mine = p == view.pid and entry.get("token") == token
                if not mine and (
                    p == view.pid or not alive(self.directory, int(p), entry["token"])
                ):
                    del procs[p]  # died (or an earlier process with our pid)
                    view.reclaimed.append(p)
            if view.pid not in procs:
                procs[view.pid] = {"token": token, "held": {}, "resident": 0, "pinned": 0}
                view.changed = True
            yield view
            if view.changed or view.reclaimed:
                self._save(procs)
        self.reclaimed += len(view.reclaimed)

    def entries(self) -> dict[int, int]:
        """pid -> bytes held in reservations, live processes only (inspection and tests)."""
        with self.session() as view:
            return {int(p): sum(e["held"].values()) for p, e in view.procs.items()}
