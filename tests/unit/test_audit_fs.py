"""File-system decisions of the audit hook (sandbox/audit_fs.py).

Covers: a relative name resolved against its directory fd or the cwd; /proc found by the device
of the file (`//proc/./self/mem`, `/dev/fd/N`, a walk from a directory fd of `/`); writes,
renames and directory changes outside scratch refused with their dir_fd resolved; a raw
relative os.open (no dir_fd visible in the event) refused; reads elsewhere allowed.
Does not cover: origins (which frame did it) or the hook itself (tests/eval).
"""

from __future__ import annotations

import os

import pytest

from tritonforge.evaluation.sandbox import audit_fs

DEVS = audit_fs.proc_devices()


@pytest.fixture
def scratch(tmp_path):
    s = tmp_path / "scratch"
    s.mkdir()
    return str(s)


def test_resolve_relative_to_dir_fd_and_cwd(tmp_path) -> None:
    fd = os.open(str(tmp_path), os.O_RDONLY)
    try:
        assert audit_fs.resolve("a/b", fd) == str(tmp_path / "a" / "b")
        assert audit_fs.resolve("/x/../y", fd) == "/y"
        assert audit_fs.resolve("rel", None) == os.path.join(os.getcwd(), "rel")
        assert audit_fs.resolve("rel", 10_000) is None  # not an open fd
        assert audit_fs.resolve(b"bytes", fd) == str(tmp_path / "bytes")
    finally:
        os.close(fd)


@pytest.mark.skipif(not DEVS, reason="no procfs")
def test_proc_found_by_device_not_by_spelling() -> None:
    for path in ("/proc/self/mem", "//proc/./self/mem", "/proc/../proc/self/status"):
        assert audit_fs.on_procfs(os.path.normpath(path), DEVS), path
    assert audit_fs.on_procfs("/dev/fd/0", DEVS)  # a symlink into /proc/self/fd
    assert not audit_fs.on_procfs("/usr/lib", DEVS)


@pytest.mark.skipif(not DEVS, reason="no procfs")
def test_bad_paths(scratch) -> None:
    root = os.open("/", os.O_RDONLY)
    try:
        rdwr = os.O_RDWR
        assert "on /proc" in audit_fs.bad_path("open", ("//proc/self/mem", "rb", 0), scratch, DEVS)
        assert audit_fs.bad_path("open", ("proc/self/mem", None, rdwr), scratch, DEVS)  # raw
        assert audit_fs.bad_path("os.mkdir", ("tmp/x", 0o777, root), scratch, DEVS)
        assert audit_fs.bad_path("os.rename", ("a", "b", -1, root), scratch, DEVS)
        assert audit_fs.bad_path("os.remove", ("etc/passwd", root), scratch, DEVS)
        inside = os.path.join(scratch, "f")
        assert audit_fs.bad_path("open", (inside, "w", 0), scratch, DEVS) is None
        assert audit_fs.bad_path("open", ("/usr/lib/os-release", "r", 0), scratch, DEVS) is None
        assert audit_fs.bad_path("open", ("/etc/x", "w", 0), scratch, DEVS)
        assert audit_fs.bad_path("os.mkdir", (inside + "d", 0o777, None), scratch, DEVS) is None
        assert audit_fs.bad_path("os.chmod", (5, 0o600, None), scratch, DEVS) is None  # an fd
    finally:
        os.close(root)
