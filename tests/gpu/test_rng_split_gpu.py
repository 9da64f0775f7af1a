"""Per-generator seeding on a CUDA device (run on the H200: `pytest -m gpu
tests/gpu/test_rng_split_gpu.py`).

Covers: the judge's input draws on cuda:0 are bit for bit those of torch.manual_seed(seed) +
get_inputs() under the device context, for a get_inputs drawing on the GPU only, on the GPU and
the CPU (an explicit device="cpu", randperm), with a device named explicitly, and from no global
generator, and name the generators used; a Model whose __init__ draws on the GPU gets the weights
of torch.manual_seed(INIT_SEED) + Model() (what the candidate's worker builds ModelNew with); a
draw on the GPU finishes while another thread's model initialises on the CPU for seconds, and
concurrent draws meanwhile give per seed the same inputs; with KernelBench data, L2/57's draw at
its original size does not wait for L2/55's 32768x32768 nn.Linear build (the regression: 13.4 s
in `reference` on the H200 under the one global RNG lock).
Does not cover: the CPU-side logic (tests/unit/test_rng_split.py).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from helpers.seeding import (
    SLOW_S,
    SlowBuild,
    draw_concurrently,
    manual,
    problem,
    same,
    wait_for_cpu_generator,
)
from tritonforge.evaluation.judge.reference import INIT_SEED, ReferenceStore

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
DEV = "cuda:0"
# $TRITONFORGE_KERNELBENCH (a GPU machine carries the data there), else ../shared beside the clone
DATA = Path(
    os.environ.get("TRITONFORGE_KERNELBENCH")
    or Path(__file__).resolve().parents[2].parent / "shared" / "data" / "kernelbench"
)

HEAD = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, *xs):
        return xs[0]

def get_init_inputs():
    return []
"""
INPUTS = {  # get_inputs bodies -> the generators a draw on cuda:0 uses
    "return [torch.randn(64, 16), torch.rand(3)]": {DEV},
    "return [torch.randn(8, device='cpu'), torch.randperm(8), torch.randn(4)]": {"cpu", DEV},
    "return [torch.randn(8, device='cpu').cuda(), torch.randint(0, 5, (4,), device='cpu')]": {
        "cpu"
    },
    "return [torch.randn(4, device='cpu'), torch.randn(4, device='cuda')]": {"cpu", DEV},
    "return [torch.arange(8.0), torch.ones(3)]": set(),
}
DEVICE_INIT = HEAD.replace(
    "self.lin = nn.Linear(16, 16)",
    "self.lin = nn.Linear(16, 16)\n        self.register_buffer('b', torch.randn(16, device='cuda'))",
)


def source(body: str) -> str:
    return HEAD + f"\ndef get_inputs():\n    {body}\n"


def on_device(ref: Any, seed: int) -> Any:
    def draw() -> list[Any]:
        with torch.device(DEV):
            return list(ref.module.get_inputs())

    return manual(draw, seed)


@pytest.mark.parametrize("body", list(INPUTS))
def test_gpu_draws_are_manual_seed(body: str) -> None:
    store = ReferenceStore()
    ref = store.reference(problem("draw", source(body)), DEV)
    for seed in (5, 6, 5):
        assert same(ref.draw_inputs(seed, "native"), on_device(ref, seed)), (body, seed)
    assert ref.draws_from == INPUTS[body], body


def test_model_drawing_on_the_gpu_gets_manual_seed_weights() -> None:
    store = ReferenceStore()
    src = DEVICE_INIT + "\ndef get_inputs():\n    return [torch.randn(4)]\n"
    ref = store.reference(problem("devinit", src), DEV)
    want = manual(lambda: ref.module.Model(), INIT_SEED).state_dict()
    got = ref.model.state_dict()
    assert got.keys() == want.keys() == {"lin.weight", "lin.bias", "b"}
    assert all(torch.equal(got[k].to(DEV), want[k].to(DEV)) for k in want)


def test_gpu_draw_does_not_wait_for_a_cpu_build() -> None:
    store = ReferenceStore()
    refs = [store.reference(problem(f"d{i}", source(b)), DEV) for i, b in enumerate(INPUTS)]
    gpu_only = refs[0]
    seeds = range(6)
    want = {(i, s): on_device(r, s) for i, r in enumerate(refs) for s in seeds}
    for r in refs:
        r.draw_inputs(0, "native")  # learns the generators each draws from
    slow = SlowBuild(store, DEV).start()
    t0 = time.monotonic()
    gpu_only.draw_inputs(1, "native")
    torch.cuda.synchronize()
    free_s, free_during = time.monotonic() - t0, slow.building()
    got = draw_concurrently(refs, seeds, threads=3)
    slow.thread.join(timeout=60)
    assert free_during and free_s < SLOW_S / 2, f"GPU draw took {free_s:.2f} s during a build"
    assert got.keys() == want.keys()
    assert all(same(got[k], want[k]) for k in want)


@pytest.mark.skipif(not DATA.is_dir(), reason=f"no KernelBench data in {DATA}")
def test_kernelbench_draw_does_not_wait_for_l2_55() -> None:
    from tritonforge.problems.kernelbench import load_kernelbench

    by_num = {p.problem_id: p for p in load_kernelbench(DATA) if p.level == 2}
    store = ReferenceStore()
    small = store.reference(by_num[57], DEV)
    store.case(small, 1, "native")  # warm: the first draw learns its generators
    build = threading.Thread(target=store.reference, args=(by_num[55], DEV))
    t0 = time.monotonic()
    build.start()
    wait_for_cpu_generator()  # L2/55's kaiming init is under way (7-9 s on the H200's host)
    t1 = time.monotonic()
    case = store.case(small, 2, "native")
    draw_s = time.monotonic() - t1
    during = build.is_alive()
    build.join(timeout=120)
    build_s = time.monotonic() - t0
    want = on_device(small, 2)
    assert same(list(case.inputs), want)
    print(f"L2/57 case {draw_s:.3f} s while L2/55 built ({build_s:.1f} s)")
    assert during and draw_s < 1.0, (draw_s, build_s)
