"""The persisting-L2 reset of the timing loop's flush (sandbox/l2_persist.py) where there is no
GPU: the driver library is looked for once, and without it the reset is a no-op that answers
False (never raises); the timing loop holds the function captured at import. Does not cover:
the reset on a GPU (tests/gpu/test_l2_persist_gpu.py).
"""

from __future__ import annotations

import ctypes

from tritonforge.evaluation.sandbox import l2_persist, timing_loop


def _driver_loads() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def test_reset_is_a_no_op_without_a_driver() -> None:
    assert l2_persist.available() == _driver_loads()
    if not l2_persist.available():
        assert l2_persist.reset_persisting_l2() is False


def test_timing_loop_captured_the_reset() -> None:
    assert timing_loop._RESET_L2 is l2_persist.reset_persisting_l2
