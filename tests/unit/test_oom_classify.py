"""Out-of-memory errors as the issue's H200 run met them: each is `out_of_resources` with figures,
never `crash`; the caching allocator's NVML asserts count; Triton's shared-memory limit is
out_of_resources but not a device-memory error (no retry alone)."""

from __future__ import annotations

import os
import socket
import time

import pytest
import torch

from tritonforge.evaluation.judge import replies
from tritonforge.evaluation.judge.admission import GIB, JudgeOutOfMemory
from tritonforge.evaluation.judge.candidate import failure_verdict, judge_oom_verdict, oom_figures
from tritonforge.evaluation.sandbox import protocol
from tritonforge.evaluation.sandbox.classify import (
    classify_exception,
    is_device_oom,
    memory_facts,
    requested_bytes,
)
from tritonforge.evaluation.sandbox.protocol import Reader, pack, send_msg
from tritonforge.evaluation.sandbox.worker import Worker
from tritonforge.types import Status

TORCH_OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB "
    "of which 412.00 MiB is free."
)
NVML_ASSERT = (
    'NVML_SUCCESS == r INTERNAL ASSERT FAILED at "/pytorch/c10/cuda/CUDACachingAllocator.cpp":'
    "1131, please report a bug to PyTorch."
)


def test_device_oom_texts() -> None:
    assert is_device_oom(torch.OutOfMemoryError(TORCH_OOM))
    assert is_device_oom(RuntimeError(NVML_ASSERT))
    assert is_device_oom(
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)")
    )
    assert is_device_oom(RuntimeError("cuMemCreate failed: CUDA_ERROR_OUT_OF_MEMORY"))
    wrapped = RuntimeError("forward failed")
    wrapped.__cause__ = torch.OutOfMemoryError(TORCH_OOM)
    assert is_device_oom(wrapped)
    shared_mem = RuntimeError(
        "out of resource: shared memory, Required: 262144, Hardware limit: 232448"
    )
    assert not is_device_oom(shared_mem)
    assert classify_exception(shared_mem, "forward") is Status.OUT_OF_RESOURCES
    assert not is_device_oom(ValueError("shape mismatch"))
    for phase in ("import", "init", "forward"):
        assert classify_exception(RuntimeError(NVML_ASSERT), phase) is Status.OUT_OF_RESOURCES


def test_requested_bytes_and_figures() -> None:
    assert requested_bytes(TORCH_OOM) == 2 * GIB
    assert requested_bytes("Tried to allocate 512.00 MiB") == 512 << 20
    assert requested_bytes(NVML_ASSERT) is None
    assert memory_facts("cpu", TORCH_OOM) == {"requested": 2 * GIB}
    line = oom_figures(
        {
            "requested": 2 * GIB,
            "allocated": 18 * GIB,
            "reserved": 19 * GIB,
            "device_free": GIB // 2,
            "device_total": 140 * GIB,
        }
    )
    assert line == (
        "out of device memory: tried to allocate 2.00 GiB; this process held 18.00 GiB "
        "(19.00 GiB reserved); device free 0.50 GiB of 140.00 GiB"
    )
    assert oom_figures({}) == "out of device memory"
    with pytest.raises(replies.ReplyError):  # the figures are counts, or the reply is refused
        replies.parse("run", {"ok": False, "status": "out_of_resources", "message": "",
                              "memory": {"requested": "lots", "allocated": True}})  # fmt: skip


def test_failure_verdict_carries_the_figures() -> None:
    reply = {
        "ok": False,
        "status": "out_of_resources",
        "phase": "forward",
        "message": TORCH_OOM,
        "memory": {"requested": 2 * GIB},
    }
    v = failure_verdict(replies.parse("run", reply), "compile", False)
    assert v.status is Status.OUT_OF_RESOURCES
    assert v.message.startswith("out of device memory: tried to allocate 2.00 GiB")


def test_judge_oom_is_never_the_candidates_fault() -> None:
    exc = JudgeOutOfMemory("comparing outputs", torch.OutOfMemoryError(TORCH_OOM))
    v = judge_oom_verdict(exc, alone=False)
    assert v.status is Status.JUDGE_FAULT and "2.00 GiB" in v.message
    alone = judge_oom_verdict(exc, alone=True)
    assert alone.status is Status.JUDGE_FAULT and "alone" in alone.message
    ref = JudgeOutOfMemory("building a case of kb/1", torch.OutOfMemoryError(TORCH_OOM))
    assert judge_oom_verdict(ref, alone=True).status is Status.RESOURCE_LIMIT
    assert judge_oom_verdict(ref, alone=False).status is Status.JUDGE_FAULT


def _no_memory(*args, **kwargs):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.50 GiB")


def test_worker_answers_an_oom_in_its_own_code(monkeypatch) -> None:
    # Regression: the worker's own copy of the inputs runs outside the candidate's guarded call;
    # an OOM there ended the worker (exit 70, `crash`) on the H200.
    judge, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    w = Worker(child, {}, report=None)
    w.model = torch.nn.ReLU()
    desc, fd = pack([torch.ones(4)])
    send_msg(judge, {"op": "run", "inputs": desc}, [fd])
    os.close(fd)
    send_msg(judge, {"op": "exit"})
    monkeypatch.setattr(protocol, "copy_windows", _no_memory)  # unpacking the inputs
    assert w.loop() == 0  # answered, and still serving
    monkeypatch.undo()
    reader = Reader(judge)
    reply, _ = reader.recv(time.monotonic() + 5)
    assert reply["ok"] is False and reply["status"] == "out_of_resources"
    assert reply["phase"] == "run" and reply["memory"] == {"requested": 3 * GIB // 2}
    # no candidate path yet: the message is the error itself, not garbled by the path rewrite
    assert reply["message"].endswith("CUDA out of memory. Tried to allocate 1.50 GiB")
    assert reader.recv(time.monotonic() + 5)[0] == {"ok": True}  # the exit
    judge.close()
    child.close()
