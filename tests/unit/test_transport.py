"""The data path between judge and worker, without a GPU: buffer layout, validation, fallback.

Covers: `pack_into`/`unpack_buffer` (the layout of a shared device buffer, exercised here on a
CPU tensor: round trip of every dtype with strides, views vs private copies, values that do not
fit, hostile descriptors); `Transport` on CPU (never offers device buffers, says why; outputs
claimed to be in a buffer never offered are a protocol violation; the judge-side mutation check
maps changed bytes to top-level input indices); devshare refusing a CPU device; the worker's
shared-buffer set-up answering a malformed offer with an error instead of dying; the CUDA C++
backend's build failure classified as compile_error.
Does not cover: real CUDA VMM sharing (tests/gpu/test_devshare_gpu.py).
"""

from __future__ import annotations

import os
import socket
import threading

import pytest
import torch

from tritonforge.evaluation.judge.reference import Case
from tritonforge.evaluation.judge.transport import Transport
from tritonforge.evaluation.sandbox.classify import classify_exception
from tritonforge.evaluation.sandbox.devshare import DevShareError, ExportedBuffer
from tritonforge.evaluation.sandbox.protocol import (
    DTYPES,
    ProtocolError,
    pack,
    pack_into,
    packed_size,
    unpack,
    unpack_buffer,
)
from tritonforge.types import Status


def _sample(dtype: torch.dtype) -> torch.Tensor:
    x = torch.arange(24).reshape(4, 6) - 7
    if dtype == torch.bool:
        return x > 0
    if dtype.is_complex:
        return torch.complex(x.float(), -x.float()).to(dtype)
    return x.to(dtype)


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_buffer_layout_round_trips_every_dtype(name: str) -> None:
    x = _sample(DTYPES[name])
    value = [x, x.t(), (x[:, ::2], 3), x[0, 0], 1.5, None]
    buf = torch.zeros(4096, dtype=torch.uint8)
    desc = pack_into(value, buf)
    assert desc is not None and desc["size"] == packed_size(value)
    got = unpack_buffer(desc, buf, keep_strides=True)
    assert got[4] == 1.5 and got[5] is None and got[2][1] == 3
    for a, b in [(got[0], x), (got[1], x.t()), (got[2][0], x[:, ::2]), (got[3], x[0, 0])]:
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
        assert torch.equal(a, b)
    # the same layout as a memfd: the bytes agree
    mdesc, fd = pack(value)
    try:
        assert mdesc["tensors"] == desc["tensors"]
        assert torch.equal(unpack(mdesc, fd)[0], x)
    finally:
        os.close(fd)


def test_views_share_the_buffer_copies_do_not() -> None:
    buf = torch.zeros(1024, dtype=torch.uint8)
    desc = pack_into([torch.ones(8)], buf)
    view = unpack_buffer(desc, buf, copy=False)[0]
    copy = unpack_buffer(desc, buf, copy=True)[0]
    view.mul_(3)
    assert torch.equal(unpack_buffer(desc, buf)[0], torch.full((8,), 3.0))
    assert torch.equal(copy, torch.ones(8))


def test_value_that_does_not_fit_is_refused_before_writing() -> None:
    buf = torch.zeros(100, dtype=torch.uint8)
    assert pack_into([torch.ones(8), torch.ones(30)], buf) is None  # 64 + 120 bytes
    assert int(buf.sum()) == 0


@pytest.mark.parametrize(
    "meta",
    [
        {"dtype": "float32", "shape": [8], "offset": 128, "nbytes": 32},  # past the end
        {"dtype": "float32", "shape": [4], "offset": 2, "nbytes": 16},  # misaligned
        {"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 12},  # size disagrees
        {"dtype": "object", "shape": [4], "offset": 0, "nbytes": 16},
        {"dtype": "float32", "shape": [-4], "offset": 0, "nbytes": 16},
        {"dtype": "float32", "shape": [0, 2**63], "offset": 0, "nbytes": 0},  # torch overflow
        {"dtype": "float32", "shape": [0, 2**62, 2**62], "offset": 0, "nbytes": 0},
    ],
)
def test_hostile_descriptors_are_protocol_errors(meta: dict) -> None:
    buf = torch.zeros(128, dtype=torch.uint8)
    desc = {"tree": {"t": "tensor", "i": 0}, "tensors": [meta], "size": 128}
    with pytest.raises(ProtocolError):
        unpack_buffer(desc, buf)


def _case(value: list) -> Case:
    desc, fd = pack(value)
    packed = torch.zeros(desc["size"], dtype=torch.uint8)
    pack_into(value, packed)
    return Case(value, None, desc, fd, 0, 0, packed)


def test_transport_on_cpu_uses_memfds_and_says_why() -> None:
    case = _case([torch.ones(4)])
    t = Transport("cpu")
    assert t.offer(case) == (None, []) and not t.active and t.reason == "cpu device"
    fields, fds = t.send(case)
    try:
        assert fields.wire() == {"inputs": case.desc} and len(fds) == 1
        assert os.fstat(fds[0]).st_ino == os.fstat(case.fd).st_ino
    finally:
        for fd in fds:
            os.close(fd)
    assert Transport("cuda:0", "memfd").reason == "memfd transport selected"


def test_outputs_in_a_buffer_never_offered_are_a_protocol_violation() -> None:
    t = Transport("cpu")
    desc, fd = pack([torch.ones(2)])
    os.close(fd)
    with pytest.raises(ProtocolError, match="never offered"):
        t.outputs({**desc, "shared": True}, [])
    r, w = os.pipe()
    os.close(w)
    with pytest.raises(ProtocolError, match="expected one output buffer"):
        t.outputs(desc, [r, os.dup(r)])  # both closed by outputs()
    with pytest.raises(OSError):
        os.fstat(r)


def test_judge_side_mutation_check_names_top_level_inputs() -> None:
    case = _case([torch.ones(4), 7, [torch.zeros(3), torch.ones(2)], torch.ones(5)])
    t = Transport("cpu")
    t.active, t.inp_t = True, case.packed.clone()
    assert t.mutated(case, shared=True) == []
    # a byte of the nested list's second tensor: top-level input 2
    meta = case.desc["tensors"][2]
    t.inp_t[meta["offset"]] ^= 1
    assert t.mutated(case, shared=True) == [2]
    assert t.mutated(case, shared=False) == []  # inputs sent by memfd: the worker's check only
    t.inp_t[case.desc["tensors"][3]["offset"] + 4] ^= 1
    assert t.mutated(case, shared=True) == [2, 3]
    os.close(case.fd)


def test_devshare_refuses_a_cpu_device() -> None:
    with pytest.raises(DevShareError):
        ExportedBuffer("cpu", 1024)


def test_worker_answers_a_malformed_offer_with_an_error() -> None:
    from tritonforge.evaluation.sandbox.worker import Worker

    a, b = socket.socketpair()
    r, w = os.pipe()
    try:
        worker = Worker(a, {}, None)
        got = worker._map_shared({"in": 8}, [r, w])  # too few fields: refused, fds closed
        # (regression: a descriptor popped before the sizes were read was leaked)
        assert "error" in got and worker.shared_in is None
        for fd in (r, w):
            with pytest.raises(OSError):
                os.fstat(fd)
    finally:
        a.close()
        b.close()


def test_cuda_extension_build_failure_is_a_compile_error() -> None:
    try:
        try:
            raise OSError("ninja exited with 1")
        except OSError as inner:
            raise RuntimeError(
                "Error building extension 'tf_relu': error: identifier \"nope\" is undefined"
            ) from inner
    except RuntimeError as exc:
        assert classify_exception(exc, "import") is Status.COMPILE_ERROR
    assert classify_exception(RuntimeError("boom"), "import") is Status.IMPORT_ERROR


def test_offer_without_a_cuda_driver_falls_back_to_memfds(caplog: pytest.LogCaptureFixture) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine can share device memory")
    case = _case([torch.ones(4)])
    t = Transport("cuda:0")
    assert t.offer(case) == (None, []) and not t.active
    assert "DevShareError" in t.reason  # said once in the log, then used as the stats key
    fields, fds = t.send(case)
    for fd in fds:
        os.close(fd)
    assert "shared" not in fields.wire() and len(fds) == 1
    os.close(case.fd)


def test_judge_device_lock_is_one_reentrant_lock_per_device() -> None:
    from tritonforge.evaluation.judge.gpu_lock import device_lock, judge_device

    a, b = device_lock("cuda:0"), device_lock("cuda:1")
    assert a is device_lock("cuda:0") and a is not b
    with judge_device("cuda:0"), judge_device("cuda:0"):  # re-entrant: nested sections
        assert b.acquire(blocking=False)
        b.release()
        # the lock is held by this thread: another thread cannot take it meanwhile
        got: list[bool] = []
        t = threading.Thread(target=lambda: got.append(a.acquire(blocking=False)))
        t.start()
        t.join()
        assert got == [False]


def test_overlapping_regions_cannot_multiply_the_judges_copies() -> None:
    # Regression (review): 64 descriptors of the whole buffer made the judge clone it 64 times.
    buf = torch.zeros(128, dtype=torch.uint8)
    whole = {"dtype": "uint8", "shape": [128], "offset": 0, "nbytes": 128}
    tree = {"t": "list", "v": [{"t": "tensor", "i": i} for i in range(3)]}
    with pytest.raises(ProtocolError, match="more bytes"):
        unpack_buffer({"tree": tree, "tensors": [whole] * 3, "size": 128}, buf)


@pytest.mark.parametrize(
    "facts",
    [None, 5, {"mutated": 5}, {"mutated": [[0]]}, {"mutated": [0, "a", True]}, {"aliased": []}],
)
def test_a_malformed_mutation_report_does_not_parse(facts: object) -> None:
    # Regression (review): a malformed `mutated` from the worker raised TypeError in the judge,
    # turning a candidate that did mutate its inputs into an internal_error. The reply is now
    # parsed once (judge/replies.py): such facts are a ReplyError (protocol_violation); the
    # judge's own look at the shared buffer is merged into parsed facts only.
    from tritonforge.evaluation.judge import replies

    with pytest.raises(replies.ReplyError):
        replies._facts(facts)
