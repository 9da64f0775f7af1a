"""KernelBench inputs and weights under per-generator seeding (judge/rng.py) are those of
`torch.manual_seed`: every scalable L1/L2 reference (CPU sizes), drawn by the judge's
`Reference.draw_inputs` and built by `ReferenceStore.reference`, bit for bit equal to
torch.manual_seed(seed) + get_inputs() and torch.manual_seed(INIT_SEED) + Model(*init_inputs)
(what the candidate's worker builds ModelNew with). Skips when ../shared/data/kernelbench is
absent. Does not cover: GPU draws (tests/gpu/test_rng_split_gpu.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tritonforge.evaluation.judge.reference import INIT_SEED, ReferenceStore
from tritonforge.evaluation.sandbox.protocol import flatten_tensors
from tritonforge.types import Problem

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "kernelbench"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"no KernelBench data in {DATA}")


@pytest.fixture(scope="module")
def scaled() -> list[Problem]:
    from tritonforge.problems.kernelbench import load_kernelbench
    from tritonforge.problems.scaling import default_cache_dir, scale_problems

    out, _ = scale_problems(
        load_kernelbench(DATA), workers=2, progress=False, cache_dir=default_cache_dir()
    )
    return out


def tensors(value: Any) -> list[torch.Tensor]:
    return list(flatten_tensors(value))


def identical(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
        for x, y in zip(a, b, strict=True)
    )


@pytest.mark.slow
def test_kernelbench_draws_and_weights_are_manual_seed(scaled: list[Problem]) -> None:
    assert len(scaled) == 199
    store = ReferenceStore()
    wrong = []
    for p in scaled:
        ref = store.reference(p, "cpu")
        torch.manual_seed(INIT_SEED)
        init = list(ref.module.get_init_inputs())
        torch.manual_seed(INIT_SEED)
        model = ref.module.Model(*init)
        got, want_sd = ref.model.state_dict(), model.state_dict()
        if got.keys() != want_sd.keys() or not identical([*got.values()], [*want_sd.values()]):
            wrong.append(f"{p.id}: weights differ")
        for seed in (11, 12):
            torch.manual_seed(seed)
            want = tensors(list(ref.module.get_inputs()))
            if not identical(tensors(ref.draw_inputs(seed, "native")), want):
                wrong.append(f"{p.id}: inputs of seed {seed} differ")
        if ref.draws_from != frozenset({"cpu"}):
            wrong.append(f"{p.id}: draws from {sorted(ref.draws_from)}")
        store.clear()
    assert not wrong, "\n".join(wrong)
