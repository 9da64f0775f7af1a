"""Fixtures shared by every test tier (pytest finds this file; nothing imports it).

Covers: `one_thread` (tiny models on one intra-op thread; opt in with
`pytestmark = pytest.mark.usefixtures("one_thread")`). Helpers that are not fixtures live in
tests/helpers/ (importable as `helpers.*`). torch is imported only when a test uses a fixture
that needs it, so torch-free tests stay torch-free.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny models on one intra-op thread: on a busy 2-core machine, two OpenMP threads per
    matmul made the trainer tests 10-50x slower (spin-waiting); one thread is fast and
    deterministic."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
