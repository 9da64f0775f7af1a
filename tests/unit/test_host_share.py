"""One GPU, many judging processes: the gate and the memory ledger hold across real processes.

Covers, with separate Python processes (tests/helpers/host_contender.py) on a temporary runtime
directory: an exclusive holder keeps another process's shared request out until it lets go;
shared holders of two processes overlap; a process SIGKILLed while holding the gate (exclusive)
never blocks the next one; memory reservations of two processes are admitted against one
capacity (one waits while the other holds, both run when they fit together; a later small
request does not pass another process's earlier waiting one; an idle process trims its caches
for another's request); a killed process's
ledger entries are reclaimed and its bytes admitted to another process; the runtime directory's
choice and checks; device keys. Every process is ours, ended by pid, with bounded waits.
Does not cover: the in-process rules of the gate (test_device_gate.py) and the budget
(test_admission.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tritonforge.evaluation.judge import host_share
from tritonforge.evaluation.judge.host_ledger import HostLedger

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"
WAIT_S = 60.0  # generous: children import torch on a busy 2-core machine


class Contender:
    """One contender process and its events file."""

    def __init__(self, tmp: Path, name: str, *args: str) -> None:
        self.events = tmp / f"{name}.events"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(SRC)])}
        cmd = [sys.executable, "-m", "helpers.host_contender", str(self.events), str(tmp / "rt")]
        self.proc = subprocess.Popen([*cmd, "dev0", *args], env=env)

    def times(self) -> dict[str, float]:
        if not self.events.exists():
            return {}
        lines = [ln.split() for ln in self.events.read_text().splitlines() if ln.strip()]
        return {k: float(t) for k, t in lines}

    def wait_for(self, event: str, timeout: float = WAIT_S) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if event in self.times():
                return self.times()[event]
            assert self.proc.poll() is None or event in self.times(), (event, self.proc.returncode)
            time.sleep(0.02)
        raise AssertionError(f"{self.events.name}: no '{event}' within {timeout} s")

    def held_off(self, seconds: float, why: str = "") -> None:
        """It asked, and `seconds` later it still waits."""
        self.wait_for("asked")
        time.sleep(seconds)
        assert "acquired" not in self.times(), why or f"{self.events.name} was let in"

    def release(self) -> None:
        self.events.with_name(self.events.name + ".release").touch()

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)  # our own child, by pid
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture
def contenders(tmp_path: Path) -> Iterator[list[Contender]]:
    (tmp_path / "rt").mkdir(mode=0o700)
    started: list[Contender] = []
    yield started
    for c in started:
        c.stop()


def _start(contenders: list[Contender], tmp: Path, name: str, *args: str) -> Contender:
    c = Contender(tmp, name, *args)
    contenders.append(c)
    return c


def _holding(contenders: list[Contender], tmp: Path, name: str, *args: str) -> Contender:
    """A contender that has acquired what it asked for."""
    c = _start(contenders, tmp, name, *args)
    c.wait_for("acquired")
    return c


def test_exclusive_holder_keeps_another_process_out(contenders, tmp_path: Path) -> None:
    a = _holding(contenders, tmp_path, "a", "gate", "exclusive")
    b = _start(contenders, tmp_path, "b", "gate", "shared")
    b.held_off(1.0, "shared access granted during another's timing")
    a.release()
    released = a.wait_for("released")
    assert b.wait_for("acquired") >= released - 0.05
    b.release()


def test_shared_holders_of_two_processes_overlap(contenders, tmp_path: Path) -> None:
    a = _holding(contenders, tmp_path, "a", "gate", "shared")
    b = _start(contenders, tmp_path, "b", "gate", "shared")
    b.wait_for("acquired")  # while a still holds its shared access
    assert "released" not in a.times()
    a.release()
    b.release()


def test_a_killed_holder_never_blocks_the_others(contenders, tmp_path: Path) -> None:
    a = _holding(contenders, tmp_path, "a", "gate", "exclusive")
    b = _start(contenders, tmp_path, "b", "gate", "exclusive")
    b.held_off(0.5)
    killed = time.monotonic()
    a.kill()
    assert b.wait_for("acquired", timeout=10.0) - killed < 10.0
    b.release()


def test_memory_is_admitted_against_one_capacity(contenders, tmp_path: Path) -> None:
    a = _holding(contenders, tmp_path, "a", "reserve", "60", "100")
    small = _holding(contenders, tmp_path, "small", "reserve", "30", "100")  # 60 + 30 fit
    big = _start(contenders, tmp_path, "big", "reserve", "50", "100")
    big.held_off(1.0, "admitted past the capacity shared by the processes")
    a.release()
    assert big.wait_for("acquired") >= a.wait_for("released") - 0.05
    small.release()
    big.release()


def test_a_later_small_request_yields_to_an_earlier_waiting_process(
    contenders, tmp_path: Path
) -> None:
    """Without this a stream of small evaluations in one process could starve a big one in
    another: the small one would fit next to the holder, but not next to the earlier waiter."""
    a = _holding(contenders, tmp_path, "a", "reserve", "60", "100")
    big = _start(contenders, tmp_path, "big", "reserve", "50", "100")
    big.held_off(1.0)  # the head of its process, and it has published that it waits
    small = _start(contenders, tmp_path, "small", "reserve", "30", "100")
    small.held_off(1.0, "60 + 30 fit, but big has waited longer for 50")
    a.release()
    released = a.wait_for("released")
    assert big.wait_for("acquired") >= released - 0.05
    assert small.wait_for("acquired") >= released - 0.05  # 50 + 30 fit together
    big.release()
    small.release()


def test_an_idle_process_trims_its_caches_for_another_process(contenders, tmp_path: Path) -> None:
    """Without the watch, the caches of an idle judge (a serve-eval between requests) would keep
    another process's request out until its stuck timer said it does not fit."""
    idle = _holding(contenders, tmp_path, "idle", "cache", "80", "100")
    b = _start(contenders, tmp_path, "b", "reserve", "50", "100")
    assert b.wait_for("acquired", timeout=15.0) >= idle.wait_for("trimmed") - 0.05
    b.release()
    idle.release()


def test_a_killed_process_bytes_are_reclaimed(contenders, tmp_path: Path) -> None:
    a = _holding(contenders, tmp_path, "a", "reserve", "80", "100")
    ledger = HostLedger(tmp_path / "rt", "dev0")
    assert ledger.entries().get(a.proc.pid) == 80
    b = _start(contenders, tmp_path, "b", "reserve", "50", "100")
    b.held_off(0.5)
    killed = time.monotonic()
    a.kill()
    assert b.wait_for("acquired", timeout=10.0) - killed < 10.0
    entries = ledger.entries()
    assert a.proc.pid not in entries and entries.get(b.proc.pid) == 50
    b.release()
    b.wait_for("released")
    b.proc.wait(timeout=30)
    assert ledger.entries().get(b.proc.pid) is None  # exited: reclaimed at the next session
    assert ledger.reclaimed >= 1


def test_runtime_dir_choice_and_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(host_share.ENV, "off")
    assert host_share.runtime_dir() is None
    monkeypatch.setenv(host_share.ENV, str(tmp_path / "chosen"))
    assert host_share.runtime_dir() == tmp_path / "chosen"
    monkeypatch.delenv(host_share.ENV)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert host_share.runtime_dir() == tmp_path / "tritonforge"
    (tmp_path / "tritonforge").chmod(0o777)  # a default directory others can enter: refused
    assert host_share.runtime_dir() is None


def test_device_keys() -> None:
    assert host_share.device_key("cpu") == "cpu"
    key = host_share.device_key("cuda:0")
    assert key.startswith("cuda-") and "/" not in key
    # a name that is no device index (tests name gates "cuda:stats-test") is its own key
    assert host_share.device_key("cuda:stats-test") == "cuda_stats-test"
    assert host_share.device_key("cuda") == host_share.device_key("cuda:0")
