"""Reproducible runs: pinned threads, deterministic kernels, seeded global generators.

Covers: `make_reproducible(seed, threads)`, called at the start of an SFT or RL run and of the
demo: sets torch's intra-op thread count (a float sum's order, and so its rounding, depends on
how the work is split between threads), asks torch for deterministic algorithms (warn-only, so an
op without a deterministic variant still runs), sets the cuBLAS workspace variable that
deterministic GPU matmuls need, and seeds Python's, NumPy's and torch's global generators.
Returns what it set, for the run's records.
Does not cover: the seeds of each random source the project owns (SFT data order, the RL
driver's problem sampling, the engine's sampling generators, the evaluator's hidden input seeds):
those are config fields, and a run is reproducible only when they are fixed too (the demo fixes
all of them from one `seed`). Different CPU instruction sets or library builds may still round
differently: "the same numbers" holds for machines of the same kind.
"""

from __future__ import annotations

import os
import random
from typing import Any

__all__ = ["make_reproducible"]


def make_reproducible(
    seed: int, threads: int | None = None, deterministic: bool = True
) -> dict[str, Any]:
    """Pin threads (when given); with `deterministic`, deterministic algorithms and seeded
    global RNGs. Returns a record of the settings."""
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    if not deterministic:
        return {"threads": torch.get_num_threads(), "deterministic_algorithms": False}
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (1 << 32))
    except ImportError:  # pragma: no cover - numpy ships with torch wheels
        pass
    return {
        "seed": seed,
        "threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "torch": torch.__version__,
    }
