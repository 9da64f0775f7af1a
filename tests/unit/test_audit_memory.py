"""Bounds of the CPU interpreter's memory accesses (sandbox/audit_memory.py), on address arrays.

Covers: an access is inside when every unmasked address plus its width lies in one of the
launch's storages; masked-off lanes (the usual out-of-range tail of a block) do not count; a
scalar mask; no launch in progress means nothing is inside. Does not cover: the stubs in a real
interpreted launch (tests/eval: s3_interpreter_pointer_peek and the legit corpus).
"""

from __future__ import annotations

import numpy as np

from tritonforge.evaluation.sandbox import audit_memory
from tritonforge.evaluation.sandbox.audit_state import STATE


def test_addresses_checked_against_the_launch_storages() -> None:
    audit_memory.set_ranges([(1000, 64), (5000, 16)])
    try:
        ptrs = np.array([1000, 1060, 5000, 5012], dtype=np.uint64)
        assert not audit_memory._outside(ptrs, None, 4)
        assert audit_memory._outside(ptrs, None, 8)  # 1060 + 8 runs past the first storage
        tail = np.array([1056, 1064, 1068], dtype=np.uint64)
        assert audit_memory._outside(tail, None, 4)
        assert not audit_memory._outside(tail, np.array([True, False, False]), 4)
        assert not audit_memory._outside(np.array([9999], dtype=np.uint64), False, 4)
        assert audit_memory._outside(np.array([7000], dtype=np.uint64), True, 1)
    finally:
        audit_memory.set_ranges([])
    assert STATE.ranges is None
    assert audit_memory._outside(np.array([1000], dtype=np.uint64), None, 1)
    assert not audit_memory._outside(np.array([], dtype=np.uint64), None, 1)
