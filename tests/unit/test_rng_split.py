"""One lock per global generator (judge/rng.py): seeded calls hold and seed exactly the
generators they draw from, with the values of `torch.manual_seed`.

Covers: `seeded` gives what torch.manual_seed(seed) + the same call gives (randn, randperm, an
explicit device="cpu", nn.Linear init) and names the generators used (none for the meta device or
a private generator; the CPU's for torch.default_generator passed explicitly); a draw from a
generator not held is stopped before it changes that generator, even inside the reference's own
`except Exception`; a Reference's draws and model equal the manual_seed ones; with real threads,
a draw that uses no global generator finishes while another thread's model initialises on the
CPU for seconds, a draw that uses the CPU generator waits for it, and concurrent draws give per
seed the same inputs as serial ones.
Regression: one global RNG lock made L2/57's input draw on the H200 wait 13.4 s for L2/55's
32768x32768 nn.Linear initialising on the CPU. The GPU side (a draw on a GPU does not wait; CUDA
values identical) is tests/gpu/test_rng_split_gpu.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from helpers.seeding import SLOW_S, SlowBuild, draw_concurrently, manual, problem, same
from tritonforge.evaluation.judge import rng
from tritonforge.evaluation.judge.reference import INIT_SEED, ReferenceStore

MIXED = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.register_buffer("noise", torch.randn(n, device="cpu"))

    def forward(self, x, idx):
        return self.lin(x[idx]) + self.noise

def get_inputs():
    return [torch.randn(8, 16), torch.randperm(8, device="cpu")]

def get_init_inputs():
    return [16]
"""

PRIVATE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2

def get_inputs():
    g = torch.Generator().manual_seed(5)
    return [torch.rand(64, generator=g) + torch.arange(64.0)]

def get_init_inputs():
    return []
"""


RESEEDING = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x

def get_inputs():
    torch.manual_seed(0)
    return [torch.arange(4.0)]

def get_init_inputs():
    return []
"""


@pytest.mark.parametrize(
    ("fn", "used"),
    [
        (lambda: torch.randn(5, 3), {"cpu"}),
        (lambda: [torch.randperm(9), torch.randint(0, 7, (4,))], {"cpu"}),
        (lambda: torch.randn(4, device="cpu") * torch.rand(4), {"cpu"}),
        (lambda: torch.nn.Linear(6, 3).weight.detach(), {"cpu"}),
        (lambda: torch.randn(4, generator=torch.default_generator), {"cpu"}),
        (lambda: torch.randn(4, generator=torch.Generator().manual_seed(3)), set()),
        (lambda: torch.arange(6.0), set()),
    ],
)
def test_seeded_is_manual_seed_and_names_generators(fn: Callable[[], Any], used: set) -> None:
    got, drew = rng.seeded(fn, 1234)  # starts holding nothing: retried with what it reaches for
    assert same(got, manual(fn, 1234))
    assert drew == used


def test_meta_device_draws_from_no_generator() -> None:
    def build() -> Any:
        with torch.device("meta"):
            return torch.nn.Linear(1 << 15, 1 << 15)(torch.randn(2, 1 << 15))

    out, drew = rng.seeded(build, INIT_SEED)
    assert out.is_meta and drew == frozenset()


def test_unheld_generator_is_refused_before_it_draws() -> None:
    torch.manual_seed(7)
    before = torch.default_generator.get_state()

    def swallowing() -> None:
        try:
            torch.randn(3)
        except Exception:  # the reference's own handler must not hide the refusal
            pass

    with pytest.raises(rng.Unheld) as miss, rng.Guard(frozenset()):
        swallowing()
    assert miss.value.key == "cpu"
    assert torch.equal(torch.default_generator.get_state(), before)


def test_op_generator_keys() -> None:
    aten = torch.ops.aten
    assert rng.op_generator(aten.randn.default, ([2],), {"device": torch.device("cpu")}) == "cpu"
    assert rng.op_generator(aten.randn.default, ([2],), {"device": torch.device("meta")}) is None
    assert rng.op_generator(aten.uniform_.default, (torch.empty(2),), {}) == "cpu"
    assert rng.op_generator(aten.add.Tensor, (torch.ones(1), torch.ones(1)), {}) is None
    private = {"generator": torch.Generator()}
    assert rng.op_generator(aten.randn.generator, ([2],), private) is None


@contextmanager
def cpu_held_by_another_thread() -> Iterator[None]:
    holding, release = threading.Event(), threading.Event()

    def hold_cpu() -> None:
        with rng.held(["cpu"]):
            holding.set()
            release.wait(30)

    thread = threading.Thread(target=hold_cpu)
    thread.start()
    assert holding.wait(30)
    try:
        yield
    finally:
        release.set()
        thread.join(30)


def test_locks_are_per_generator() -> None:
    """While one thread holds the CPU generator, another takes a GPU's (keys only: no CUDA
    here) at once, and a second taker of the CPU's waits."""
    gpu = rng.generator_lock("cuda:7")
    with cpu_held_by_another_thread():
        with rng.held(["cuda:7"]):
            assert gpu.locked()
        assert not rng.generator_lock("cpu").acquire(timeout=0.2)
    with rng.held(["cuda:7", "cpu"]):  # both, in the one order
        assert rng.generator_lock("cpu").locked() and gpu.locked()


def test_a_source_that_seeds_the_generators_itself_holds_them_all() -> None:
    """torch.manual_seed is no op the guard sees: its draws hold every generator, or another
    thread's build or draw would see its seed."""
    for src in (RESEEDING, "torch.cuda.set_rng_state(s)", "torch.random.manual_seed(1)"):
        assert rng.reseeds(src), src
    for src in ("from torch import manual_seed\nmanual_seed(3)", "torch.cuda.manual_seed_all(1)"):
        assert rng.reseeds(src), src
    for src in (MIXED, PRIVATE, "g = torch.Generator(); g.manual_seed(3)"):
        assert not rng.reseeds(src), src
    ref = ReferenceStore().reference(problem("reseeds", RESEEDING), "cpu")
    ref.draw_inputs(0, "native")
    assert ref.draws_from == frozenset()  # it draws from no generator, yet:
    drawer = threading.Thread(target=ref.draw_inputs, args=(1, "native"))
    with cpu_held_by_another_thread():
        drawer.start()
        drawer.join(0.3)
        assert drawer.is_alive(), "the draw did not wait for the CPU generator"
    drawer.join(30)
    assert not drawer.is_alive()


def test_reference_draw_and_model_are_those_of_manual_seed() -> None:
    store = ReferenceStore()
    ref = store.reference(problem("mixed", MIXED), "cpu")
    for seed in (1, 99):
        assert same(ref.draw_inputs(seed, "native"), manual(ref.module.get_inputs, seed))
    assert ref.draws_from == frozenset({"cpu"})
    init = manual(ref.module.get_init_inputs, INIT_SEED)
    expected = manual(lambda: ref.module.Model(*init), INIT_SEED).state_dict()
    got = ref.model.state_dict()
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], expected[k]) for k in got)
    private = store.reference(problem("private", PRIVATE), "cpu")
    private.draw_inputs(1, "native")
    assert private.draws_from == frozenset()


def test_draw_does_not_wait_for_a_model_build_on_another_generator() -> None:
    store = ReferenceStore()
    private = store.reference(problem("private", PRIVATE), "cpu")
    mixed = store.reference(problem("mixed", MIXED), "cpu")
    private.draw_inputs(0, "native")  # learns that it draws from no global generator
    want = [manual(mixed.module.get_inputs, s) for s in (3, 4)]
    slow = SlowBuild(store).start()
    t0 = time.monotonic()
    private.draw_inputs(1, "native")
    free_s, free_during = time.monotonic() - t0, slow.building()
    got = [mixed.draw_inputs(s, "native") for s in (3, 4)]  # these draw from the CPU generator
    waited_s = time.monotonic() - t0
    slow.thread.join(timeout=60)
    assert free_during and free_s < SLOW_S / 2, f"draw took {free_s:.2f} s during the build"
    assert not slow.building()
    # the CPU lock is real: a draw from the CPU generator waited for the build to finish
    assert waited_s > SLOW_S / 2, f"CPU draw took only {waited_s:.2f} s"
    assert all(same(g, w) for g, w in zip(got, want, strict=True))


def test_concurrent_draws_give_per_seed_inputs() -> None:
    store = ReferenceStore()
    refs = [store.reference(problem(n, s), "cpu") for n, s in (("mixed", MIXED), ("p", PRIVATE))]
    seeds = range(12)
    want = {(i, s): manual(r.module.get_inputs, s) for i, r in enumerate(refs) for s in seeds}
    slow = SlowBuild(store).start()
    got = draw_concurrently(refs, seeds, threads=4)
    slow.thread.join(timeout=60)
    assert got.keys() == want.keys()
    assert all(same(got[k], want[k]) for k in want)
