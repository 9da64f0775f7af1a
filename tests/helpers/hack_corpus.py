"""Shared harness of the reward-hack corpus (tests/eval/corpus): manifests, problems, settings,
placeholders, and the machine-level watch used by the class-4 attacks.

Covers: loading `corpus/{attacks,legit}/manifest.toml`; resolving a case's problem (`builtin/NAME`
from the built-in suite at the cpu preset, or `ref:NAME` from corpus/references); the fast
settings every corpus test uses plus a case's own overrides, and those that run the timing path
on the CPU; filling `@@KEY@@` placeholders in
attack sources (paths outside the sandbox, a loopback port, an abstract unix socket, a sentinel
process and file); `MachineWatch`, which sets those up and afterwards checks that nothing happened
to the machine (files, connections, the sentinel, processes named after the marker still
running, `TF-LEAK` lines the attack prints when it read what it must not).
Does not cover: the assertions on verdicts (test_attacks.py, test_legit.py).
"""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.budget import children
from tritonforge.types import Problem

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CORPUS = Path(__file__).resolve().parents[1] / "eval" / "corpus"
REPO = Path(__file__).resolve().parents[2]


def cases(kind: str) -> list[dict[str, Any]]:
    """The manifest entries of `attacks` or `legit`, each with its source text under 'source'."""
    folder = CORPUS / kind
    entries = tomllib.loads((folder / "manifest.toml").read_text())["case"]
    for e in entries:
        e["source"] = (folder / e["file"]).read_text()
    return entries


@functools.cache
def problem(name: str, size: str = "cpu") -> Problem:
    """`builtin/relu` (built-in suite at preset `size`) or `ref:small_mean`
    (corpus/references/small_mean.py, always its own small size)."""
    if name.startswith("ref:"):
        ref = name[4:]
        return Problem(
            id=f"hack_corpus/{ref}",
            suite="hack_corpus",
            name=ref,
            reference_src=(CORPUS / "references" / f"{ref}.py").read_text(),
            size="cpu",
        )
    from tritonforge.problems import load_suite

    for p in load_suite("builtin", size=size):
        if p.id == name:
            return p
    raise KeyError(name)


def base_settings(mode: str = "strict", device: str = "cpu") -> EvalSettings:
    """Fast corpus settings: 3 trials (one per default distribution), short budgets, 4 GB."""
    s = EvalSettings(device=device, mode=mode, correctness_trials=3, perf_trials=10)
    s.budgets.import_s = 20.0
    s.budgets.compile_s = 30.0
    s.budgets.correctness_s = 60.0
    s.budgets.timing_s = 60.0
    s.limits.memory_mb = 4096
    s.limits.cpu_seconds = 120
    return s


def cpu_timing_settings(**kw: Any) -> EvalSettings:
    """The timing path on the CPU (`time_on_cpu`; its numbers mean nothing): 2 correctness
    trials, then 2 rounds of 1 warmup + 4 timed calls, exactly (`perf_round_ms` 0: interpreted
    calls slowed by a loaded machine would otherwise get fewer trials, and tests count calls);
    `kw` overrides."""
    base: dict[str, Any] = dict(
        device="cpu",
        time_on_cpu=True,
        correctness_trials=2,
        perf_trials=8,
        perf_rounds=2,
        perf_warmup=1,
        perf_round_ms=0.0,
        bootstrap_samples=200,
    )
    return EvalSettings(**{**base, **kw})


def settings_for(case: dict[str, Any], mode: str = "strict", device: str = "cpu") -> EvalSettings:
    """Base settings plus the case's `settings` table of dotted overrides."""
    return apply_overrides(base_settings(mode, device), case.get("settings") or {})


def apply_overrides(s: EvalSettings, overrides: dict[str, Any]) -> EvalSettings:
    """`s` with dotted overrides (`budgets.compile_s = 5`) set in place; returns `s`."""
    for key, value in overrides.items():
        *path, leaf = key.split(".")
        node: Any = s
        for part in path:
            node = getattr(node, part)
        setattr(node, leaf, value)
    return s


children_of = children  # direct children of a pid (all threads), from /proc


def descendants(pid: int, keep: frozenset[int] = frozenset()) -> list[int]:
    """Descendants of `pid`, leaving out the subtrees rooted at `keep`."""
    out, stack = [], [pid]
    while stack:
        for c in children_of(stack.pop()):
            if c in keep:
                continue
            out.append(c)
            stack.append(c)
    return out


def wait_no_descendants(
    pid: int, timeout: float = 10.0, keep: frozenset[int] = frozenset()
) -> list[int]:
    """Descendants of `pid` still present after up to `timeout` s (workers are reaped async),
    besides the subtrees at `keep` (the judge's own long-lived timing process)."""
    deadline = time.monotonic() + timeout
    left = descendants(pid, keep)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = descendants(pid, keep)
    return left


class Listener:
    """A listener in a thread that counts accepted connections: loopback TCP (`port`), or with
    `abstract` an abstract unix socket (`name`: no file; one namespace per network namespace)."""

    def __init__(self, abstract: bool = False) -> None:
        if abstract:
            self.name = f"tf_attack_{uuid.uuid4().hex[:12]}"
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind("\0" + self.name)
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind(("127.0.0.1", 0))
            self.port = self.sock.getsockname()[1]
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.accepted = 0
        self._stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self.thread.join(timeout=2)
        self.sock.close()


def marked_processes(marker: str) -> list[int]:
    """Pids whose command line names `marker` (a daemon an attack left behind)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def leaks(*texts: str) -> list[str]:
    """`TF-LEAK ...` lines an attack printed when it read something it must not."""
    return [ln.strip() for t in texts for ln in t.splitlines() if ln.strip().startswith("TF-LEAK")]


class MachineWatch:
    """Targets for class-4 attacks and the checks that they were not hit.

    Placeholders: @@PROJECT@@, @@HOME@@, @@CWD@@, @@HOST_TMP@@, @@VAR_TMP@@, @@DEV_SHM@@
    (directories outside the scratch dir), @@MARKER@@ (a unique file name to create there, and
    the name a daemon carries in its argv), @@PORT@@ (loopback listener), @@ABSTRACT@@ (abstract
    unix socket listener), @@SENTINEL_PID@@ (a process of ours to kill), @@SENTINEL_FILE@@ (a
    file of ours to delete), @@JUDGE_PID@@ (this process).
    """

    def __init__(self) -> None:
        self.marker = f"tf_attack_marker_{uuid.uuid4().hex[:12]}"
        self.listener = Listener()
        self.abstract = Listener(abstract=True)
        self.sentinel = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True
        )
        fd, self.sentinel_file = tempfile.mkstemp(prefix="tf_attack_sentinel_")
        os.write(fd, b"keep me")
        os.close(fd)
        self.dirs = {
            "PROJECT": str(REPO),
            "HOME": os.path.expanduser("~"),
            "CWD": os.getcwd(),
            "HOST_TMP": tempfile.gettempdir(),
            "VAR_TMP": "/var/tmp",
            "DEV_SHM": "/dev/shm",
        }

    def render(self, source: str) -> str:
        subs = dict(self.dirs)
        subs.update(
            MARKER=self.marker,
            PORT=str(self.listener.port),
            ABSTRACT=self.abstract.name,
            SENTINEL_PID=str(self.sentinel.pid),
            SENTINEL_FILE=self.sentinel_file,
            JUDGE_PID=str(os.getpid()),
        )
        for k, v in subs.items():
            source = source.replace(f"@@{k}@@", v)
        return source

    def damage(self) -> list[str]:
        """Every machine-level effect that happened (empty list: none)."""
        found = []
        for name, d in self.dirs.items():
            hits = list(Path(d).glob(f"{self.marker}*"))
            if hits:
                found.append(f"file created in {name}: {hits[0]}")
        if self.listener.accepted:
            found.append(f"{self.listener.accepted} connection(s) reached the loopback listener")
        if self.abstract.accepted:
            found.append(f"{self.abstract.accepted} connection(s) reached the abstract socket")
        deadline = time.monotonic() + 3.0  # a killed daemon may take a moment to be reaped
        alive = marked_processes(self.marker)
        while alive and time.monotonic() < deadline:
            time.sleep(0.05)
            alive = marked_processes(self.marker)
        if alive:
            found.append(f"processes named after the marker still run: {alive}")
        if self.sentinel.poll() is not None:
            found.append(f"sentinel process was killed (code {self.sentinel.returncode})")
        if not Path(self.sentinel_file).exists():
            found.append("sentinel file was deleted")
        elif Path(self.sentinel_file).read_bytes() != b"keep me":
            found.append("sentinel file was modified")
        return found

    def close(self) -> None:
        for hit in (p for d in self.dirs.values() for p in Path(d).glob(f"{self.marker}*")):
            hit.unlink(missing_ok=True)
        self.listener.close()
        self.abstract.close()
        if self.sentinel.poll() is None:
            self.sentinel.kill()
        self.sentinel.wait()
        Path(self.sentinel_file).unlink(missing_ok=True)


def judge_case(ev: Any, case: dict[str, Any], s: EvalSettings) -> tuple[Any, list[str]]:
    """Evaluate one attack under MachineWatch with settings `s`; returns the verdict and the
    machine damage: MachineWatch's findings, a dead fork server or processes left under it,
    output not capped, `TF-LEAK` lines the attack printed."""
    watch = MachineWatch()
    try:
        v = ev.evaluate(problem(case["problem"]), watch.render(case["source"]), s)
        res = ev.started().get("cpu")
        server = res.server if res is not None else None
        damage = watch.damage()
        if server is not None and v.phase != "static":
            assert server.proc is not None and server.proc.poll() is None, "fork server died"
            left = wait_no_descendants(server.proc.pid, keep=res.own_pids())
            if left:
                damage.append(f"processes left under the fork server: {left}")
        cap = s.limits.output_bytes + 200
        if len(v.stdout_tail) > cap or len(v.stderr_tail) > cap:
            damage.append(f"output not capped: {len(v.stdout_tail)}/{len(v.stderr_tail)} bytes")
        damage += leaks(v.stdout_tail, v.stderr_tail)
        return v, damage
    finally:
        watch.close()
