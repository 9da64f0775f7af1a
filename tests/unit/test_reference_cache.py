"""Reference cache: eviction must not close a case's memfd while an evaluation still holds it.

Also: outputs kept in device memory are bounded per device; a reference that works in place
does not change the inputs the candidate gets.

Regression: on the H200 suite run (43 GPU-size problems, 6 workers) the LRU evicted a case and
closed its fd while another thread was about to `os.dup` it, giving an internal_error (EBADF).
"""

from __future__ import annotations

import gc
import os
import threading

import torch

from tritonforge.evaluation.judge.reference import Case, ReferenceStore
from tritonforge.evaluation.sandbox.protocol import unpack
from tritonforge.types import Problem

SRC = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

N = 4096

def get_inputs():
    return [torch.randn(N)]

def get_init_inputs():
    return []
"""


def test_evicted_case_keeps_its_fd_while_held() -> None:
    store = ReferenceStore(max_bytes=1)  # every new case evicts the previous one
    ref = store.reference(Problem(id="t/relu", suite="t", name="relu", reference_src=SRC), "cpu")
    held = store.case(ref, seed=1, dist="native")
    store.case(ref, seed=2, dist="native")  # evicts `held` from the cache
    dup = os.dup(held.fd)  # still valid: the holder keeps it open
    os.close(dup)
    fd = held.fd
    del held
    gc.collect()
    try:
        os.fstat(fd)
        closed = False
    except OSError:
        closed = True
    assert closed, "the evicted case's memfd must close once nothing holds it"


def test_cached_case_is_reused() -> None:
    store = ReferenceStore()
    ref = store.reference(Problem(id="t/relu", suite="t", name="relu", reference_src=SRC), "cpu")
    a = store.case(ref, seed=7, dist="shifted")
    b = store.case(ref, seed=7, dist="shifted")
    assert a is b
    assert float(a.inputs[0].mean()) > 0.5  # shifted: non-zero mean


def test_device_resident_outputs_have_their_own_bound() -> None:
    # Expected outputs and the packed inputs (what shared device buffers are filled from) live
    # on the judge's device: the cache keeps at most a quarter of that device's memory there,
    # whatever the host bound. The meta device stands in for a GPU (no data, real byte counts);
    # its bound is set by hand to two cases.
    store = ReferenceStore()
    one = 4096 * 4 + 4096 * 4  # expected output + packed input of one case
    store._device_limits["meta"] = 2 * one
    ref = store.reference(Problem(id="t/relu", suite="t", name="relu", reference_src=SRC), "meta")
    first = store.case(ref, seed=1, dist="native")
    # the host memfd is made on first use only (not here: nothing asked for it)
    assert first.device_bytes == one and first.nbytes == first.device_bytes
    assert first.packed is not None and first.packed.numel() == first.desc["size"]
    store.case(ref, seed=2, dist="native")
    assert store.case(ref, seed=1, dist="native") is first  # two cases fit
    store.case(ref, seed=3, dist="native")  # a third evicts the least recently used (seed 2)
    assert store._device_bytes["meta"] == 2 * one
    assert store.case(ref, seed=1, dist="native") is first
    assert len(store._cases) == 2


def test_reference_working_in_place_does_not_change_the_candidates_inputs() -> None:
    # Regression: Reference.run passed the very input tensors to the reference on the CPU (and,
    # since inputs are drawn on the device, on a GPU too), so a reference that works in place
    # changed the inputs that were then packed for the candidate.
    src = SRC.replace("return torch.relu(x)", "x.mul_(2)\n        return x + 1")
    store = ReferenceStore()
    ref = store.reference(
        Problem(id="t/inplace", suite="t", name="inplace", reference_src=src), "cpu"
    )
    case = store.case(ref, seed=3, dist="native")
    (fresh,) = ref.draw_inputs(3, "native")
    (sent,) = unpack(case.desc, case.fd)
    assert torch.equal(sent, fresh)
    assert torch.allclose(case.expected, 2 * fresh + 1)


def test_device_cases_make_their_memfd_on_first_use_only() -> None:
    # On a GPU the packed device copy is what workers get; the host memfd (a device-to-host copy
    # of every input: seconds for KernelBench's 6-GiB inputs) is made only when asked for.
    # A CPU tensor stands in for the packed device buffer.
    packed = torch.arange(256, dtype=torch.uint8)
    desc = {"tree": {"t": "list", "v": []}, "tensors": [], "size": 256}
    grown: list[int] = []
    case = Case([], None, desc, -1, 256, 256, packed)
    case.on_memfd = grown.append
    assert case._fd == -1 and grown == []
    fd = case.fd
    assert fd >= 0 and case.fd == fd and grown == [256]  # made once, counted once
    assert os.pread(fd, 256, 0) == bytes(range(256))
    case.close()
    assert case.fd == -1 and grown == [256]  # never made again after close


def test_room_callback_that_reads_the_store_does_not_deadlock() -> None:
    # Regression: the device bound was computed while the store's lock was held, and memory
    # admission's room callback reads the store (model bytes): the first case on a GPU hung.
    store = ReferenceStore()
    store._device_limits["meta"] = 1 << 40
    store.device_room = lambda device: (
        (1 << 30) - store.model_bytes(device) - store.case_bytes(device)
    )
    ref = store.reference(Problem(id="t/relu", suite="t", name="relu", reference_src=SRC), "meta")
    done: list[bool] = []
    t = threading.Thread(target=lambda: done.append(store.case(ref, 1, "native") is not None))
    t.start()
    t.join(30)
    assert done == [True], "building a case with a room callback deadlocked"


WEIGHTED = SRC.replace(
    "class Model(nn.Module):\n    def forward(self, x):",
    "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.w = nn.Parameter(torch.ones(1024))\n\n    def forward(self, x):",
)


def test_free_device_drops_cases_then_models_least_recent_first() -> None:
    # Reference models no longer stay on the device forever (KernelBench L1+L2 hold 21 GiB of
    # weights): memory admission frees them like cached cases; a model built again keeps the
    # footprint measured before. The meta device stands in for a GPU.
    assert "nn.Parameter" in WEIGHTED
    store = ReferenceStore()
    store._device_limits["meta"] = 1 << 40
    a = store.reference(Problem(id="t/a", suite="t", name="a", reference_src=WEIGHTED), "meta")
    b = store.reference(Problem(id="t/b", suite="t", name="b", reference_src=WEIGHTED), "meta")
    store.case(a, 1, "native")
    assert a.footprint is not None and a.footprint.weights == 4096
    assert store.model_bytes("meta") == 8192 and store.case_bytes("meta") > 0
    store.reference(a.problem, "meta")  # a is now the most recently used
    store.free_device("meta", store.case_bytes("meta") + 1)  # the case, then b's model
    assert store.case_bytes("meta") == 0 and store.model_bytes("meta") == 4096
    again = store.reference(b.problem, "meta")
    assert again is not b and again.footprint is None  # b never had a case built
    store.free_device("meta", 1 << 30)
    assert store.model_bytes("meta") == 0
    rebuilt = store.reference(a.problem, "meta")
    assert rebuilt is not a and rebuilt.footprint == a.footprint
