"""Reference cache: eviction must not close a case's memfd while an evaluation still holds it.

Regression: on the H200 suite run (43 GPU-size problems, 6 workers) the LRU evicted a case and
closed its fd while another thread was about to `os.dup` it, giving an internal_error (EBADF).
"""

from __future__ import annotations

import gc
import os

from tritonforge.evaluation.reference import ReferenceStore
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
