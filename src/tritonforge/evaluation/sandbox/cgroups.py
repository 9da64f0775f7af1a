"""Per-worker cgroups: everything a candidate starts dies with it, and its memory (shared-memory,
tmpfs and memfd pages included) is limited by the kernel.

Covers: `Hierarchy.detect()` (cgroup v1 with the memory, pids and freezer controllers, or v2;
only where this process may create groups: root, or a delegated v2 subtree),
`Hierarchy.server_group()` (the fork server's own folder `tritonforge-PID` in each hierarchy),
`WorkerGroup` (made per worker with its limits: `join` from the child before anything else runs,
`procs`, `kill`, `oom_kills`, `remove`) and `reap_server`/`sweep_stale` (kill and remove the
groups of a fork server, or of fork servers that died).

Why: a process that double-forks and calls `setsid` leaves the worker's process group and, in
the rlimits sandbox, its process tree; a cgroup keeps it however it forks. Shared memory is
charged to the cgroup whose process first touched the page, and stays charged while a memfd or
tmpfs file holds it, mapped or not, so a memory limit here counts what RLIMIT_AS and the RSS
poll do not. Memory limits set here: `memory.limit_in_bytes` (+ `memsw`) or `memory.max`
(+ `memory.swap.max` 0, `memory.oom.group`); processes: `pids.max` (threads count too).
Disabled with TRITONFORGE_CGROUPS=0 in the fork server's environment (the fallback, zygote.py's
watchdog and child subreaper, then does the job).
Does not cover: the fallback (treewatch.py), the fork-server loop (zygote.py).
"""

from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass, field

PREFIX = "tritonforge-"
V1_CONTROLLERS = ("memory", "pids", "freezer")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _own_paths() -> dict[str, str]:
    """This process's cgroup per controller ('' key for the v2 hierarchy)."""
    out: dict[str, str] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _id, ctrls, path = line.rstrip("\n").split(":", 2)
            for c in ctrls.split(",") if ctrls else [""]:
                out[c] = path
    return out


def _mounts() -> dict[str, tuple[str, str]]:
    """Controller ('' for cgroup2) -> (mount point, root of the mount) from mountinfo."""
    out: dict[str, tuple[str, str]] = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if len(rfields) < 3 or len(fields) < 5:
                continue
            fstype, opts = rfields[0], rfields[2].split(",")
            if fstype == "cgroup2":
                out.setdefault("", (fields[4], fields[3]))
            elif fstype == "cgroup":
                for c in V1_CONTROLLERS:
                    if c in opts:
                        out.setdefault(c, (fields[4], fields[3]))
    return out


def _join(mount: str, root: str, own: str) -> str:
    rel = own[len(root) :] if root != "/" and own.startswith(root) else own
    return os.path.normpath(mount + "/" + rel.lstrip("/"))


@dataclass(frozen=True)
class Hierarchy:
    """Where this process may make groups: one folder per v1 controller, or one v2 folder."""

    version: int
    bases: dict[str, str]  # controller ("memory", "pids", "freezer"; "unified" for v2) -> dir

    @classmethod
    def detect(cls) -> Hierarchy | None:
        if os.environ.get("TRITONFORGE_CGROUPS", "1") == "0":
            return None
        try:
            own, mounts = _own_paths(), _mounts()
        except OSError:
            return None
        v1 = {c: _join(*mounts[c], own[c]) for c in V1_CONTROLLERS if c in mounts and c in own}
        v1 = {c: d for c, d in v1.items() if os.access(d, os.W_OK)}
        if "memory" in v1 or "pids" in v1 or "freezer" in v1:
            return cls(1, v1)
        if "" in mounts and "" in own:
            base = _join(*mounts[""], own[""])
            if os.access(base, os.W_OK) and os.path.exists(os.path.join(base, "cgroup.procs")):
                return cls(2, {"unified": base})
        return None

    def server_group(self, server_pid: int) -> dict[str, str]:
        """Make (or reuse) the fork server's folder in each hierarchy; v2 also enables the
        memory and pids controllers below it where the parent allows."""
        dirs = {}
        for c, base in self.bases.items():
            d = os.path.join(base, f"{PREFIX}{server_pid}")
            os.makedirs(d, exist_ok=True)
            dirs[c] = d
        if self.version == 2:
            for d in (self.bases["unified"], dirs["unified"]):
                for ctrl in ("memory", "pids"):
                    try:
                        _write(os.path.join(d, "cgroup.subtree_control"), f"+{ctrl}")
                    except OSError:
                        pass  # not delegated, or the folder has processes: kill-only groups
        return dirs


@dataclass
class WorkerGroup:
    """One worker's cgroup in every hierarchy of the fork server."""

    version: int
    dirs: dict[str, str]
    memory_limited: bool = False
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def create(
        cls, h: Hierarchy, server_dirs: dict[str, str], name: str, memory_mb: int, pids: int
    ) -> WorkerGroup:
        dirs = {}
        for c, parent in server_dirs.items():
            d = os.path.join(parent, name)
            os.makedirs(d, exist_ok=True)
            dirs[c] = d
        g = cls(h.version, dirs)
        g._limit(memory_mb << 20, pids)
        return g

    def _set(self, ctrl: str, file: str, value: str) -> bool:
        path = os.path.join(self.dirs.get(ctrl, ""), file)
        try:
            _write(path, value)
            return True
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                self.warnings.append(f"cgroup {file}: {exc.strerror}")
            return False

    def _limit(self, memory: int, pids: int) -> None:
        if self.version == 1:
            if "memory" in self.dirs:
                self.memory_limited = self._set("memory", "memory.limit_in_bytes", str(memory))
                self._set("memory", "memory.memsw.limit_in_bytes", str(memory))
            if "pids" in self.dirs:
                self._set("pids", "pids.max", str(pids))
            return
        self.memory_limited = self._set("unified", "memory.max", str(memory))
        if self.memory_limited:
            self._set("unified", "memory.swap.max", "0")
            self._set("unified", "memory.oom.group", "1")
        self._set("unified", "pids.max", str(pids))

    def join(self) -> None:
        """Move the calling process into the group (every hierarchy). Run in the child first."""
        pid = str(os.getpid())
        for d in self.dirs.values():
            _write(os.path.join(d, "cgroup.procs"), pid)

    def procs(self) -> list[int]:
        for d in self.dirs.values():
            try:
                return [int(x) for x in _read(os.path.join(d, "cgroup.procs")).split()]
            except (OSError, ValueError):
                continue
        return []

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer killed in this group (memory limit hit)."""
        path = (
            os.path.join(self.dirs.get("memory", ""), "memory.oom_control")
            if self.version == 1
            else os.path.join(self.dirs["unified"], "memory.events")
        )
        try:
            for line in _read(path).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def _freeze(self, on: bool) -> bool:
        d = self.dirs.get("freezer")
        if d is None or not self._set("freezer", "freezer.state", "FROZEN" if on else "THAWED"):
            return False
        deadline = time.monotonic() + 0.5
        while on and time.monotonic() < deadline:
            try:
                if _read(os.path.join(d, "freezer.state")).strip() == "FROZEN":
                    break
            except OSError:
                break
            time.sleep(0.005)
        return True

    def kill(self, timeout: float = 5.0) -> int:
        """SIGKILL every process in the group until it is empty; returns how many were seen.
        v2 uses `cgroup.kill`; v1 freezes the group first, so nothing forks while it is listed."""
        seen: set[int] = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = self.procs()
            if not pids:
                break
            seen.update(pids)
            if self.version == 2 and self._set("unified", "cgroup.kill", "1"):
                time.sleep(0.005)
                continue
            frozen = self._freeze(True)
            for pid in self.procs() if frozen else pids:
                seen.add(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if frozen:
                self._freeze(False)
            time.sleep(0.005)
        return len(seen)

    def remove(self, timeout: float = 2.0) -> None:
        """Remove the (empty) group; a group still busy after `timeout` is left to sweep_stale."""
        deadline = time.monotonic() + timeout
        for d in self.dirs.values():
            while True:
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.01)


def _workers_of(server_dirs: dict[str, str], version: int) -> list[WorkerGroup]:
    names: set[str] = set()
    for d in server_dirs.values():
        try:
            names.update(e.name for e in os.scandir(d) if e.is_dir())
        except OSError:
            continue
    return [
        WorkerGroup(version, {c: os.path.join(d, n) for c, d in server_dirs.items()})
        for n in sorted(names)
    ]


def reap_server(h: Hierarchy, server_pid: int) -> int:
    """Kill every process left in the groups of fork server `server_pid` and remove them (the
    judge calls this after a fork server exits or dies). Returns the processes killed."""
    dirs = {c: os.path.join(b, f"{PREFIX}{server_pid}") for c, b in h.bases.items()}
    dirs = {c: d for c, d in dirs.items() if os.path.isdir(d)}
    if not dirs:
        return 0
    killed = 0
    for g in _workers_of(dirs, h.version):
        killed += g.kill()
        g.remove()
    WorkerGroup(h.version, dirs).remove(timeout=0.5)
    return killed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(h: Hierarchy) -> int:
    """Reap the groups of fork servers that are no longer running (killed with SIGKILL, say)."""
    stale: set[int] = set()
    for base in h.bases.values():
        try:
            for e in os.scandir(base):
                tail = e.name[len(PREFIX) :]
                if e.name.startswith(PREFIX) and tail.isdigit() and not _alive(int(tail)):
                    stale.add(int(tail))
        except OSError:
            continue
    return sum(reap_server(h, pid) for pid in sorted(stale))
