"""The judge <-> worker wire protocol (evaluation.protocol): framing, memfd tensors, validation.

Covers: pack/unpack round trips (every supported dtype incl. bf16/bool/int64/complex64, 0-d,
empty, non-contiguous with and without keep_strides, nested lists/tuples with scalars), the
sealed memfd (no write, resize or writable shared mapping), unpacking straight to a device
(meta on CPU; every dtype on a GPU with the `gpu` marker), unpacking a window at a time (only a
window of the memfd stays resident), malformed descriptors and trees
rejected with ProtocolError (offset beyond size, wrong nbytes, bad dtype, bad geometry, too
deep, too many tensors, bad indices), what pack refuses, and framed messages over a socket pair
(fds attached, deadlines, closed peers, oversized or invalid frames).
"""

from __future__ import annotations

import copy
import fcntl
import mmap
import os
import socket
import struct
import time

import pytest
import torch

from tritonforge.evaluation.sandbox import protocol
from tritonforge.evaluation.sandbox.protocol import (
    DTYPES,
    MAX_DEPTH,
    MAX_TENSORS,
    Deadline,
    PeerClosed,
    ProtocolError,
    Reader,
    copy_windows,
    flatten_tensors,
    map_tensors,
    pack,
    send_msg,
    unpack,
)


def roundtrip(value, keep_strides: bool = False):
    desc, fd = pack(value)
    try:
        return desc, unpack(desc, fd, keep_strides=keep_strides)
    finally:
        os.close(fd)


def sample(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(3, 5, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(3, 5, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        return torch.randn(3, 5, generator=g).to(dtype)
    return torch.randint(-100 if dtype != torch.uint8 else 0, 100, (3, 5), generator=g).to(dtype)


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_roundtrip_every_dtype(name: str) -> None:
    x = sample(DTYPES[name])
    desc, [y] = roundtrip([x])
    assert y.dtype == x.dtype and y.shape == x.shape
    assert torch.equal(y, x)
    assert desc["tensors"][0]["dtype"] == name
    assert desc["tensors"][0]["nbytes"] == 15 * x.element_size()


def test_int64_extremes_and_bf16_bits_survive() -> None:
    x = torch.tensor([2**62 + 1, -(2**63), 2**63 - 1], dtype=torch.int64)
    b = torch.tensor([1.0, -0.0, float("inf"), float("nan")], dtype=torch.bfloat16)
    _, (x2, b2) = roundtrip((x, b))
    assert torch.equal(x2, x)
    assert torch.equal(b2.view(torch.int16), b.view(torch.int16))  # bit-exact, incl. -0 and NaN


def test_zero_dim_and_empty() -> None:
    value = [torch.tensor(3.5), torch.empty(0, 4), torch.tensor(7, dtype=torch.int64)]
    desc, out = roundtrip(value)
    assert out[0].shape == () and out[0].item() == 3.5
    assert out[1].shape == (0, 4) and out[1].dtype == torch.float32
    assert out[2].shape == () and out[2].item() == 7
    assert [m["nbytes"] for m in desc["tensors"]] == [4, 0, 8]
    assert [m["offset"] for m in desc["tensors"]] == [0, 64, 64]  # 64-byte aligned slots


def test_non_contiguous_with_and_without_keep_strides() -> None:
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = base.t()  # shape (4, 3), strides (1, 4)
    desc, [plain] = roundtrip([t])
    assert desc["tensors"][0]["strides"] == [1, 4]
    assert torch.equal(plain, t) and plain.is_contiguous()
    _, [kept] = roundtrip([t], keep_strides=True)
    assert torch.equal(kept, t) and kept.stride() == (1, 4)
    sliced = base[:, ::2]  # strides (4, 2)
    _, [ks] = roundtrip([sliced], keep_strides=True)
    assert torch.equal(ks, sliced) and ks.stride() == (4, 2)


def test_nested_structure_and_scalars() -> None:
    a, b = torch.ones(2), torch.zeros(3, dtype=torch.int32)
    value = [a, (b, [1, 2.5, True, None, "tag"]), ((a,),)]
    _, out = roundtrip(value)
    assert isinstance(out, list) and isinstance(out[1], tuple) and isinstance(out[1][1], list)
    assert isinstance(out[2][0], tuple)
    assert torch.equal(out[0], a) and torch.equal(out[1][0], b) and torch.equal(out[2][0][0], a)
    assert out[1][1] == [1, 2.5, True, None, "tag"]
    assert out[0] is not out[2][0][0]  # every tensor slot is its own copy
    assert len(flatten_tensors(out)) == 3


def test_unpacked_tensors_are_private_copies() -> None:
    x = torch.arange(6.0)
    desc, fd = pack([x], seal=False)
    try:
        [y] = unpack(desc, fd)
        with mmap.mmap(fd, desc["size"], mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as mm:
            mm[:4] = struct.pack("<f", 99.0)  # the sender changes the buffer afterwards
        assert y[0].item() == 0.0
        [z] = unpack(desc, fd)
        assert z[0].item() == 99.0
    finally:
        os.close(fd)


def test_unpack_to_a_device_keeps_geometry() -> None:
    # The judge and the worker unpack straight into device memory (one copy, no host staging).
    # The meta device runs that path on any machine: dtype, shape and strides must survive.
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    value = [base.t(), torch.tensor(2, dtype=torch.int64), torch.empty(0, 3, dtype=torch.bool)]
    desc, fd = pack(value)
    try:
        out = unpack(desc, fd, keep_strides=True, device="meta")
    finally:
        os.close(fd)
    assert all(t.device.type == "meta" for t in out)
    assert out[0].shape == (4, 3) and out[0].stride() == (1, 4) and out[0].dtype == torch.float32
    assert out[1].shape == () and out[1].dtype == torch.int64
    assert out[2].shape == (0, 3) and out[2].dtype == torch.bool


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", sorted(DTYPES))
def test_device_roundtrip_every_dtype_on_gpu(name: str) -> None:
    # pack copies device tensors straight into the shared mapping; unpack straight back.
    x = sample(DTYPES[name]).cuda()
    value = [x, x.t(), x[:, ::2], x[0, 0]]
    desc, fd = pack(value)
    try:
        out = unpack(desc, fd, keep_strides=True, device="cuda:0")
    finally:
        os.close(fd)
    for got, want in zip(out, value):
        assert got.device.type == "cuda" and got.dtype == want.dtype and got.shape == want.shape
        assert got.stride() == want.stride()
        assert torch.equal(got.cpu(), want.cpu())


def test_sealed_memfd_cannot_be_changed() -> None:
    desc, fd = pack([torch.ones(16)])
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        for seal in (fcntl.F_SEAL_WRITE, fcntl.F_SEAL_SHRINK, fcntl.F_SEAL_GROW, fcntl.F_SEAL_SEAL):
            assert seals & seal
        with pytest.raises(PermissionError):
            os.write(fd, b"x")
        with pytest.raises(PermissionError):
            os.pwrite(fd, b"x", 0)
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 0)
        with pytest.raises(PermissionError):
            mmap.mmap(fd, desc["size"], mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        with pytest.raises(PermissionError):
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, 0)  # the seal set itself is sealed
        [y] = unpack(desc, fd)
        assert torch.equal(y, torch.ones(16))
    finally:
        os.close(fd)


# -- malformed descriptors --------------------------------------------------------------------


@pytest.fixture()
def packed():
    desc, fd = pack([torch.arange(8, dtype=torch.float32), torch.ones(2, 2, dtype=torch.int64)])
    yield desc, fd
    os.close(fd)


def _bad(desc, fd, edit) -> None:
    d = copy.deepcopy(desc)
    edit(d)
    with pytest.raises(ProtocolError):
        unpack(d, fd)


@pytest.mark.parametrize(
    ("label", "edit"),
    [
        ("offset beyond size", lambda d: d["tensors"][1].update(offset=10**6)),
        ("offset straddles end", lambda d: d["tensors"][1].update(offset=d["size"] - 8)),
        ("negative offset", lambda d: d["tensors"][0].update(offset=-64)),
        ("nbytes too small", lambda d: d["tensors"][0].update(nbytes=28)),
        ("nbytes too large", lambda d: d["tensors"][0].update(nbytes=64)),
        ("shape/nbytes disagree", lambda d: d["tensors"][0].update(shape=[9])),
        ("bad dtype", lambda d: d["tensors"][0].update(dtype="float128")),
        # regression: an unhashable dtype used to escape as TypeError (judge: internal_error)
        ("dtype not a string", lambda d: d["tensors"][0].update(dtype=["float32"])),
        ("negative dim", lambda d: d["tensors"][0].update(shape=[-8])),
        ("float dim", lambda d: d["tensors"][0].update(shape=[8.0])),
        ("rank 17", lambda d: d["tensors"][0].update(shape=[1] * 17, nbytes=4)),
        ("offset not int", lambda d: d["tensors"][0].update(offset="0")),
        ("meta not a dict", lambda d: d["tensors"].__setitem__(0, [1, 2])),
        ("no tensor list", lambda d: d.pop("tensors")),
        ("too many tensors", lambda d: d.update(tensors=d["tensors"] * (MAX_TENSORS // 2 + 1))),
        ("tensor index out of range", lambda d: d.update(tree={"t": "tensor", "i": 2})),
        ("tensor index negative", lambda d: d.update(tree={"t": "tensor", "i": -1})),
        ("unknown node kind", lambda d: d.update(tree={"t": "pickle", "v": "..."})),
        ("bool as number", lambda d: d.update(tree={"t": "num", "v": True})),
        ("tree not a dict", lambda d: d.update(tree=[1, 2])),
        ("sequence not a list", lambda d: d.update(tree={"t": "list", "v": "abc"})),
        (
            "sequence too long",
            lambda d: d.update(
                tree={"t": "list", "v": [{"t": "const", "v": None}] * (4 * MAX_TENSORS + 1)}
            ),
        ),
    ],
)
def test_malformed_descriptor_raises(packed, label: str, edit) -> None:
    desc, fd = packed
    _bad(desc, fd, edit)


def test_too_deep_tree_raises(packed) -> None:
    desc, fd = packed
    node = {"t": "tensor", "i": 0}
    for _ in range(MAX_DEPTH + 2):
        node = {"t": "list", "v": [node]}
    _bad(desc, fd, lambda d: d.update(tree=node))
    ok = {"t": "tensor", "i": 0}
    for _ in range(MAX_DEPTH):
        ok = {"t": "list", "v": [ok]}
    d = copy.deepcopy(desc)
    d["tree"] = ok
    out = unpack(d, fd)
    for _ in range(MAX_DEPTH):
        out = out[0]
    assert torch.equal(out, torch.arange(8, dtype=torch.float32))


def test_bad_strides_are_ignored_not_trusted(packed) -> None:
    desc, fd = packed
    d = copy.deepcopy(desc)
    d["tensors"][0]["strides"] = [-1]
    [x, _] = unpack(d, fd, keep_strides=True)
    assert torch.equal(x, torch.arange(8, dtype=torch.float32)) and x.stride() == (1,)
    d["tensors"][0]["strides"] = [1000]  # would reach far past the storage: must not
    [x, _] = unpack(d, fd, keep_strides=True)
    assert torch.equal(x, torch.arange(8, dtype=torch.float32))


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"a": torch.ones(1)}, "dict"),
        (object(), "object"),
        (torch.ones(2, dtype=torch.complex128), "dtype"),
        ([torch.ones(1)] * (MAX_TENSORS + 1), "more than"),
    ],
    ids=["dict", "object", "complex128", "too_many"],
)
def test_pack_refuses(value, fragment: str) -> None:
    with pytest.raises(ProtocolError, match=fragment):
        pack(value)


def test_pack_refuses_deep_nesting() -> None:
    value = torch.ones(1)
    for _ in range(MAX_DEPTH + 2):
        value = [value]
    with pytest.raises(ProtocolError, match="deep"):
        pack(value)


def test_map_tensors_keeps_structure() -> None:
    value = [torch.ones(2), (torch.zeros(1), 3), "s"]
    out = map_tensors(value, lambda t: t + 1)
    assert isinstance(out, list) and isinstance(out[1], tuple) and out[1][1] == 3 and out[2] == "s"
    assert torch.equal(out[0], torch.full((2,), 2.0)) and torch.equal(out[1][0], torch.ones(1))


# -- framing ------------------------------------------------------------------------------------


@pytest.fixture()
def pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield a, b
    a.close()
    b.close()


def test_messages_and_fds_roundtrip(pair) -> None:
    a, b = pair
    desc, fd = pack([torch.arange(4.0)])
    send_msg(a, {"op": "run", "inputs": desc, "nan": float("nan")}, [fd])
    send_msg(a, {"op": "exit"})
    os.close(fd)
    reader = Reader(b)
    msg, fds = reader.recv(time.monotonic() + 5)
    assert msg["op"] == "run" and len(fds) == 1 and msg["nan"] != msg["nan"]
    [x] = unpack(msg["inputs"], fds[0])
    assert torch.equal(x, torch.arange(4.0))
    os.close(fds[0])
    msg, fds = reader.recv(time.monotonic() + 5)
    assert msg == {"op": "exit"} and fds == []
    assert not reader.pending()


def test_deadline_and_closed_peer(pair) -> None:
    a, b = pair
    reader = Reader(b)
    t0 = time.monotonic()
    with pytest.raises(Deadline):
        reader.recv(time.monotonic() + 0.2)
    assert 0.15 < time.monotonic() - t0 < 2.0
    a.sendall(struct.pack("<I", 100) + b"{")  # half a message, then the peer goes away
    a.close()
    with pytest.raises(PeerClosed):
        reader.recv(time.monotonic() + 5)


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack("<I", 2**31),  # announces an oversized message
        struct.pack("<I", 5) + b"{oops",  # invalid JSON
        struct.pack("<I", 6) + b"[1, 2]",  # not an object
    ],
    ids=["oversized", "invalid_json", "not_object"],
)
def test_bad_frames_raise(pair, frame: bytes) -> None:
    a, b = pair
    a.sendall(frame)
    with pytest.raises(ProtocolError) as info:
        Reader(b).recv(time.monotonic() + 5)
    assert not isinstance(info.value, (Deadline, PeerClosed))


def test_unsolicited_bytes_are_visible(pair) -> None:
    a, b = pair
    send_msg(a, {"ok": True})
    send_msg(a, {"ok": True, "forged": 1})
    reader = Reader(b)
    reader.recv(time.monotonic() + 5)
    assert reader.pending()  # the judge uses this to flag injected frames


def _rss_shmem_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssShmem:"):
                return int(line.split()[1])
    pytest.skip("no RssShmem in /proc/self/status")


def test_windowed_copy_leaves_only_a_window_of_the_memfd_resident() -> None:
    # A 16 GiB KernelBench input copied to the device in one piece made the timing process
    # resident in all of it, and the resident-memory watchdog killed it (twice: judge_fault).
    n = 96 << 20
    x = torch.arange(n // 4, dtype=torch.int32)
    desc, fd = pack([x])
    try:
        with mmap.mmap(fd, desc["size"], mmap.MAP_SHARED, mmap.PROT_READ) as mm:
            before = _rss_shmem_kb()
            dest = torch.empty(n, dtype=torch.uint8)
            copy_windows(mm, desc["tensors"][0]["offset"], dest, window=8 << 20)
            windowed = _rss_shmem_kb() - before
            bytes(mm[: len(mm)])  # what one whole-buffer read leaves resident
            whole = _rss_shmem_kb() - before
    finally:
        os.close(fd)
    assert torch.equal(dest.view(torch.int32), x)
    assert whole >= 80 << 10, whole  # the mechanism is observable on this kernel
    assert windowed <= 16 << 10, windowed


def test_unpack_in_many_windows_is_exact(monkeypatch) -> None:
    monkeypatch.setattr(protocol, "COPY_WINDOW_BYTES", 4096 + 8)  # windows not page-aligned
    value = [torch.randn(3000), torch.arange(5000, dtype=torch.int64).reshape(50, 100).t()]
    desc, fd = pack(value)
    try:
        out = unpack(desc, fd, keep_strides=True)
    finally:
        os.close(fd)
    assert all(torch.equal(a, b) for a, b in zip(out, value))
    assert out[1].stride() == value[1].stride()


def test_reader_works_on_a_descriptor_numbered_past_1024() -> None:
    """Regression: a judge holding many cached cases' memfds got socket descriptors above 1023,
    where select() raised "filedescriptor out of range" (an internal_error for every verdict of
    the KernelBench self-judgement's last problems). The reader polls instead."""
    import socket as socket_module

    a, b = socket_module.socketpair()
    high = socket_module.socket(fileno=os.dup2(b.fileno(), 1500))
    try:
        assert high.fileno() >= 1024
        reader = Reader(high)
        send_msg(a, {"ok": True, "n": 1})
        msg, fds = reader.recv(time.monotonic() + 5.0)
        assert msg == {"ok": True, "n": 1} and fds == []
        assert not reader.pending()
    finally:
        a.close()
        b.close()
        high.close()
