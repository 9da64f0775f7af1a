"""The reference's own rounding error (judge/noise.rounding_error) in the comparison.

Covers: an ill-conditioned reference (1 - cos of nearly parallel rows, the cosine-similarity loss
on `shifted` inputs) whose input perturbation moves nothing measurable (the same summation order
on nearly the same inputs rounds the same way): with its distance from float64 added to the
tolerance an honest kernel of another summation order is accepted, without it some draws reject
it; a constant answer still fails; the error is None for float64, integer and bool outputs, for
a reference that could not run in float64, and for a wrong number of outputs; on a
well-conditioned output it adds nothing that matters. Does not cover: the perturbation noise
(degenerate.py's tests), the Evaluator path (tests/eval/test_builtin_accepted.py runs the cosine
loss there).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tritonforge.evaluation.judge.compare import compare
from tritonforge.evaluation.judge.distributions import transform
from tritonforge.evaluation.judge.noise import (
    ROUNDING_FACTOR,
    output_noise,
    perturbed,
    rounding_error,
)
from tritonforge.types import Status


def TOL(dtype: str) -> float:
    return 1e-4  # the strict preset's fp32 tolerance


def cosine_loss(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return torch.mean(1 - F.cosine_similarity(p, t, dim=1))


def one_pass_cosine_loss(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """What an honest kernel computes (the built-in Triton solution's order): dot and both
    squared norms in one pass, 1 - dot / (|p| |t|) per row, then the mean."""
    dot, pp, tt = (p * t).sum(1), (p * p).sum(1), (t * t).sum(1)
    return (1 - dot / (pp.sqrt() * tt.sqrt())).mean()


def runner(fn: Any):
    def run(inputs: list[Any], perturb: Any = None) -> Any:
        xs = [x.clone() for x in inputs]
        if perturb is not None:
            xs = [perturb(x) for x in xs]
        return fn(*xs)

    return run


def shifted_pair(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    p = torch.randn(16, 1000, generator=g)
    t = torch.randn(16, 1000, generator=g)
    return [transform(p, "shifted", g), transform(t, "shifted", g)]


def wide(fn: Any):
    def run(inputs: list[Any], perturb: Any = None) -> Any:
        xs = [x.clone() for x in inputs]
        if perturb is not None:
            xs = [perturb(x) for x in xs]
        return fn(*[x.double() for x in xs])

    return run


def judged(inputs: list[torch.Tensor], got: Any, with_rounding: bool) -> Status:
    """`got` against the cosine loss with the perturbation noise at 0, as some draws measure
    it (the perturbed inputs' sums round as the originals do); plus the rounding error."""
    expected = cosine_loss(*inputs)
    noise = [0.0]
    again = perturbed(runner(cosine_loss), inputs, expected, 0)
    rounding = rounding_error(wide(cosine_loss), inputs, expected, again, 0)
    rounding = rounding if with_rounding else None
    return compare(expected, got, TOL, "forbid", None, None, "magnitude", noise, rounding)[0]


def test_an_ill_conditioned_output_tolerates_the_references_own_rounding() -> None:
    for seed in range(6):
        inputs = shifted_pair(seed)
        honest = one_pass_cosine_loss(*inputs)
        assert judged(inputs, honest, with_rounding=True) is Status.CORRECT, seed
        assert judged(inputs, honest, with_rounding=False) is Status.NUMERICAL_MISMATCH, seed


def test_the_perturbation_noise_is_measured_on_the_same_reference() -> None:
    inputs = shifted_pair(0)
    expected = cosine_loss(*inputs)
    [noise] = output_noise(runner(cosine_loss), inputs, expected, 0)
    assert noise is not None and noise >= 0.0  # (0 in some draws: what judged() assumes)


def test_a_constant_answer_fails_where_fp32_can_tell() -> None:
    # on native draws the loss is about 1 and its rounding tiny: zero and half fail every time
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        inputs = [torch.randn(16, 1000, generator=g), torch.randn(16, 1000, generator=g)]
        assert judged(inputs, torch.zeros(()), with_rounding=True) is Status.NUMERICAL_MISMATCH
        half = cosine_loss(*inputs) * 0.5
        assert judged(inputs, half, with_rounding=True) is Status.NUMERICAL_MISMATCH
    # on shifted draws the fp32 loss is itself a few ulps of 1 - cos: zero still fails in most
    # (some draws round the reference 10% away from float64: there no fp32 kernel can tell)
    fails = [
        judged(shifted_pair(s), torch.zeros(()), with_rounding=True) is Status.NUMERICAL_MISMATCH
        for s in range(20)
    ]
    assert sum(fails) >= 16


def test_rounding_error_is_the_larger_distance_from_float64_of_two_draws() -> None:
    inputs = shifted_pair(1)
    expected = cosine_loss(*inputs)
    again = perturbed(runner(cosine_loss), inputs, expected, 7)
    [err] = rounding_error(wide(cosine_loss), inputs, expected, again, 7)
    first = abs(float(expected.double() - cosine_loss(*[x.double() for x in inputs])))
    assert err is not None and err >= first > 0


def test_no_rounding_error_without_a_float_output_or_a_float64_run() -> None:
    x = torch.randn(32, generator=torch.Generator().manual_seed(3))

    def two(v: torch.Tensor):
        return v.sum(), (v > 0).sum()

    again = perturbed(runner(two), [x], two(x), 0)
    err = rounding_error(wide(two), [x], two(x), again, 0)
    assert err[0] is not None and err[1] is None
    cannot = rounding_error(lambda inputs, perturb=None: None, [x], two(x), again, 0)
    assert cannot == [None, None]  # the model could not run in float64
    one = rounding_error(wide(lambda v: v.sum()), [x], two(x), again, 0)
    assert one == [None, None]  # a different structure
    assert rounding_error(wide(two), [x], two(x), None, 0) == [None, None]  # no values (meta)
    xd = x.double()
    again_d = perturbed(runner(torch.exp), [xd], torch.exp(xd), 0)
    assert rounding_error(wide(torch.exp), [xd], torch.exp(xd), again_d, 0) == [None]


def test_a_well_conditioned_output_gets_next_to_nothing() -> None:
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(64, 256, generator=g), torch.randn(256, 64, generator=g)

    def mm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x @ y

    expected = mm(a, b)
    again = perturbed(runner(mm), [a, b], expected, 0)
    [err] = rounding_error(wide(mm), [a, b], expected, again, 0)
    rms = float(expected.pow(2).mean().sqrt())
    assert err is not None and ROUNDING_FACTOR * err < 1e-4 * rms  # below atol x rms
