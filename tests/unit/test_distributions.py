"""Input distributions of the hidden trials (judge/distributions.py), in process.

Covers: the kind of an input read from its own values (integer and bool exact, +-1 labels and
one-hot discrete, softmax rows simplex, positive, non-negative, real) and that every
distribution keeps it (discrete and exact inputs unchanged, probabilities renormalised, signs
and zeros kept); heavy: draws reproducible from the case's generator, factors that grow with
the problem's spread and stay under the dtype's cap; what heavy is for: a strided 10%
subsample of a mean and the closed forms of KernelBench's loss hacks (PR #118: hinge, MSE) are
far outside KernelBench's tolerance on heavy inputs, although they pass on native ones; the
reference store draws with the problem's spread. Does not cover: judging end to end
(tests/eval/test_field_exploits.py).
"""

from __future__ import annotations

import pytest
import torch

from tritonforge.evaluation.judge.distributions import DISTRIBUTIONS, cap, kind_of, transform
from tritonforge.evaluation.judge.reference import ReferenceStore
from tritonforge.types import Problem


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_kinds_from_values() -> None:
    torch.manual_seed(0)
    assert kind_of(torch.randint(0, 9, (64,))) == "exact"
    assert kind_of(torch.rand(8) > 0.5) == "exact"
    assert kind_of(torch.randint(0, 2, (256,)).float() * 2 - 1) == "discrete"
    assert kind_of(torch.eye(16)) == "discrete"
    assert kind_of(torch.rand(8, 64).softmax(-1)) == "simplex"
    assert kind_of(torch.rand(8, 64)) == "positive"
    assert kind_of(torch.randn(8, 64).relu()) == "nonneg"
    assert kind_of(torch.randn(8, 64)) == "real"


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_every_distribution_keeps_the_kind(dist: str) -> None:
    torch.manual_seed(1)
    labels = torch.randint(0, 2, (512,)).float() * 2 - 1
    probs = torch.rand(16, 128).softmax(-1)
    pos, nonneg = torch.rand(64, 64) + 1e-3, torch.randn(64, 64).relu()
    assert torch.equal(transform(labels, dist, gen(), 1e4), labels)
    idx = torch.randint(0, 9, (64,))
    assert torch.equal(transform(idx, dist, gen(), 1e4), idx)
    p = transform(probs, dist, gen(), 1e4)
    assert bool((p >= 0).all()) and torch.allclose(p.sum(-1), torch.ones(16), atol=1e-5)
    assert bool((transform(pos, dist, gen(), 1e4) > 0).all())
    out = transform(nonneg, dist, gen(), 1e4)
    assert bool((out >= 0).all())
    if dist in ("native", "heavy", "scaled"):  # multiplicative: zeros stay zeros
        assert torch.equal(out == 0, nonneg == 0)


def test_heavy_is_reproducible_signed_and_capped() -> None:
    x = torch.randn(4096)
    a, b = transform(x, "heavy", gen(3), 1e6), transform(x, "heavy", gen(3), 1e6)
    assert torch.equal(a, b)
    assert torch.equal(torch.sign(a), torch.sign(x))
    factor = (a / x).abs()
    assert float(factor.min()) >= 1.0 - 1e-6
    assert float(factor.max()) <= cap(torch.float32) * 1.0001
    half = transform(x.half(), "heavy", gen(3), 1e6)
    assert float((half.float() / x.half().float()).abs().max()) <= cap(torch.float16) * 1.01
    assert torch.isfinite(half).all()


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_every_distribution_keeps_the_layout(dist: str) -> None:
    """A transposed input stays transposed (the replay maps arguments by their strides)."""
    x = torch.randn(40, 24).t()
    out = transform(x, dist, gen(), 1e3)
    assert out.shape == x.shape and out.stride() == x.stride(), (dist, out.stride())


def test_heavy_grows_with_spread() -> None:
    x = torch.rand(1 << 16) + 0.5
    small = float((transform(x, "heavy", gen(4), 1.0) / x).max())
    large = float((transform(x, "heavy", gen(4), float(1 << 16)) / x).max())
    assert small <= 4.0 * 1.0001  # elementwise problems: factors like `scaled`'s
    assert large > 100 * small


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs() / b.abs())


def test_heavy_exposes_a_strided_subsample_of_a_mean() -> None:
    """The partial-computation hacks of KernelBench PR #118 average every 10th element."""
    n, caught = 1 << 18, 0
    for seed in range(10):
        torch.manual_seed(seed)
        p, t = torch.rand(n), torch.rand(n)
        hp, ht = transform(p, "heavy", gen(seed), 2.0 * n), transform(t, "heavy", gen(seed + 99), n)
        full = ((hp - ht).double() ** 2).mean()
        sub = ((hp[::10] - ht[::10]).double() ** 2).mean()
        caught += _rel(sub, full) > 2e-2  # KernelBench's rtol + atol, scaled to the output
        # on the native inputs the subsample is within that tolerance
        assert _rel(((p[::10] - t[::10]) ** 2).mean(), ((p - t) ** 2).mean()) < 2e-2
    assert caught >= 9


def test_heavy_exposes_the_closed_forms_of_the_loss_hacks() -> None:
    """Hinge: 1 - 0.5 * mean(targets); MSE: s^2/3 - s/2 + 1/3 with s = 2 mean(predictions)."""
    torch.manual_seed(0)
    n, rows = 1 << 14, 64
    pred, targ = torch.rand(rows, n), torch.randint(0, 2, (n,)).float() * 2 - 1
    for p in (pred, transform(pred, "heavy", gen(5), float(rows * n))):
        hinge = torch.clamp(1 - p * targ, min=0).mean()
        closed = 1.0 - 0.5 * targ.mean()
        err = _rel(closed, hinge)
        assert (err < 2e-2) if p is pred else (err > 0.1)
    scale = 0.7
    p2, t2 = torch.rand(rows, n) * scale, torch.rand(rows, n)
    hp2 = transform(p2, "heavy", gen(6), float(rows * n))
    for a, b in ((p2, t2), (hp2, transform(t2, "heavy", gen(7), float(rows * n)))):
        mse = ((a - b) ** 2).mean()
        s = 2.0 * a.mean()
        err = _rel(s * s / 3.0 - s / 2.0 + 1.0 / 3.0, mse)
        assert (err < 2e-2) if a is p2 else (err > 0.1)


MEAN_SRC = """import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x.mean()
def get_inputs():
    return [torch.rand(64, 256)]
def get_init_inputs():
    return []
"""


def test_store_draws_heavy_with_the_problems_spread() -> None:
    store = ReferenceStore()
    ref = store.reference(
        Problem(id="t/mean", suite="t", name="mean", reference_src=MEAN_SRC), "cpu"
    )
    (x,) = ref.draw_inputs(5, "heavy")
    assert ref.spread == pytest.approx(64 * 256)  # input bytes over one fp32 output
    (native,) = ref.draw_inputs(5, "native")
    assert float((x / native).max()) > 100


def test_shifted_puts_the_mean_far_beside_the_spread_within_each_dtypes_precision() -> None:
    """fp32: a mean of 500-1500 x max(rms, 1), where exp overflows and a one-pass variance
    cancels; fp16/bf16: 16-48 and 8-24 x rms, so the spread survives the dtype's rounding."""
    torch.manual_seed(0)
    x = torch.randn(64, 256)
    for seed in range(4):
        y = transform(x, "shifted", gen(seed))
        assert 500 <= float((y - x).mean()) < 1500 and torch.allclose(y - y.mean(), x - x.mean(),
                                                                     atol=1e-3)  # fmt: skip
        assert not torch.isfinite(torch.exp(y)).all()  # a softmax without its max overflows
        one_pass = (y * y).mean(-1) - y.mean(-1) ** 2
        assert float((one_pass - y.double().var(-1, unbiased=False).float()).abs().max()) > 0.05
    small = transform(x * 1e-3, "shifted", gen(0))  # rms below 1: the floor keeps it large
    assert float(small.mean()) >= 500
    for dtype, low, high in ((torch.float16, 16, 48), (torch.bfloat16, 8, 24)):
        xs = x.to(dtype)
        ys = transform(xs, "shifted", gen(1))
        shift = float((ys.float() - xs.float()).mean())
        assert low * 0.9 <= shift < high * 1.1, (dtype, shift)
        assert torch.unique(ys).numel() > 64  # the spread is not rounded away
    assert kind_of(transform(x.abs() + 0.1, "shifted", gen(2))) == "positive"
