"""How far a reference's outputs move when its inputs move by a few ulps: the rounding noise an
honest kernel's different summation order makes, measured on the reference itself.

Covers: `Perturber`, which multiplies every floating element of an input copy by (1 + d * v),
v uniform in [-1, 1], d = PERTURB_ULPS x the dtype's epsilon (in place, a chunk at a time);
`perturbed(run, inputs, expected, seed)`: the reference on a perturbed copy of its inputs;
`noise_of(expected, again)` (and `output_noise`, both at once): per top-level output,
rms(again - expected), the output's noise (None for integer and bool outputs). Rounding errors of a kernel
grow with its inputs' magnitude and its reduction lengths, not with its output's: for a
well-conditioned output the noise is a few ulps of the output's own rms, for a mean of a
normalised tensor (KernelBench L2/23) or a layer norm of shifted inputs a few ulps of the
intermediates, and a constant output of exact arithmetic has none. compare.py's `magnitude`
rule adds NOISE_FACTOR times it to the absolute tolerance (atol x rms(expected)); degenerate.py
perturbs the same way for its yardstick of "the same output".
`rounding_error(wide, inputs, expected, again, seed)`: per output, its rms distance from the
same reference run in float64 (the larger of two draws), which compare.py adds
(ROUNDING_FACTOR times) to the absolute tolerance under every rule. Does not cover: which reference (reference.py), the comparison
itself (compare.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

PERTURB_ULPS = 4.0
# compare.py adds this many times an output's noise (how far it moved when the inputs moved by
# PERTURB_ULPS ulps) to the absolute tolerance under `magnitude`: an honest kernel's rounding is
# a few ulps of the same sensitivity, not the preset's atol times it (which let anything pass
# on shifted inputs under kernelbench: a layer norm's noise there is ~600x its rms)
NOISE_FACTOR = 32.0
# compare.py adds this many times an output's rounding error (its rms distance from float64) to
# the absolute tolerance: an honest kernel of another summation order lands within a few times
# the reference's own error (1 - cos of nearly parallel rows on shifted inputs, 300 draws:
# median 1x, 99th percentile 10x, at most 15x)
ROUNDING_FACTOR = 16.0
_CHUNK = 1 << 24


class Perturber:
    """An in-place perturbation of input copies; `step` is the largest relative d it used."""

    def __init__(self, gen: torch.Generator):
        self._gen = gen
        self._device_gens: dict[str, torch.Generator] = {}
        self.step = 0.0

    def _device_gen(self, device: torch.device) -> torch.Generator:
        key = str(device)
        if key not in self._device_gens:
            g = torch.Generator(device=device)
            g.manual_seed(int(torch.randint(1 << 62, (), generator=self._gen)))
            self._device_gens[key] = g
        return self._device_gens[key]

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        if not t.is_floating_point() or t.numel() == 0:
            return t
        d = PERTURB_ULPS * torch.finfo(t.dtype).eps
        self.step = max(self.step, d)
        t = t if t.is_contiguous() else t.contiguous()
        flat, g = t.view(-1), self._device_gen(t.device)
        wide = torch.float64 if t.dtype == torch.float64 else torch.float32
        for i in range(0, flat.numel(), _CHUNK):
            part = flat[i : i + _CHUNK]
            v = torch.rand(part.shape, generator=g, device=t.device, dtype=wide)
            part.copy_((part.to(wide) * (1.0 + d * (2.0 * v - 1.0))).to(t.dtype))
        return t


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _tensors(values: list[Any]) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(_tensors(list(v)))
    return out


def rms_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Root mean square of a - b over the elements finite in both (0 when none)."""
    wide = torch.complex128 if a.is_complex() else torch.float64
    total, count = 0.0, 0
    fa, fb = a.reshape(-1), b.reshape(-1).to(a.device)
    for i in range(0, fa.numel(), _CHUNK):
        x, y = fa[i : i + _CHUNK].to(wide), fb[i : i + _CHUNK].to(wide)
        ok = torch.isfinite(x) & torch.isfinite(y)
        total += float((x[ok] - y[ok]).abs().square().sum())
        count += int(ok.sum())
    return (total / count) ** 0.5 if count else 0.0


def item_noise(e: Any, again: Any) -> float | None:
    """How far one top-level output moved (rms; None: integer, bool or not a number)."""
    if isinstance(e, torch.Tensor):
        if not (e.is_floating_point() or e.is_complex()) or not isinstance(again, torch.Tensor):
            return None
        if tuple(e.shape) != tuple(again.shape):
            return None
        return rms_diff(e, again)
    if isinstance(e, float) and isinstance(again, (int, float)):
        return abs(e - float(again))
    return None


def perturbed(run: Callable[..., Any], inputs: list[Any], expected: Any, seed: int) -> Any:
    """`run(inputs, perturb=...)` on copies of `inputs` moved by PERTURB_ULPS ulps (the draw of
    seed `seed`), or None on the meta device (no values: it stands in for a GPU in tests)."""
    if any(t.is_meta for t in _tensors(inputs) + _tensors(_items(expected))):
        return None
    return run(inputs, perturb=Perturber(torch.Generator().manual_seed(seed)))


def noise_of(expected: Any, again: Any) -> list[float | None]:
    """Per top-level output of `expected`, its noise: how far it moved (rms, in the output's
    units) in `again`, the same reference on perturbed inputs (`perturbed`; None: no values)."""
    exp_items = _items(expected)
    again_items = _items(again) if again is not None else []
    if len(exp_items) != len(again_items):
        return [None] * len(exp_items)
    return [item_noise(e, a) for e, a in zip(exp_items, again_items)]


def output_noise(run: Callable[..., Any], inputs: list[Any], expected: Any, seed: int):
    """`noise_of` the reference `run` (reference.Reference.run) on the perturbed draw `seed`."""
    return noise_of(expected, perturbed(run, inputs, expected, seed))


def rounding_error(
    wide: Callable[..., Any], inputs: list[Any], expected: Any, again: Any, seed: int
) -> list[float | None]:
    """Per top-level output of `expected`, the reference's own rounding error: the larger rms
    distance from float64 of two runs, `expected` on `inputs` and `again` on the perturbed draw
    `seed` (`perturbed`); `wide(inputs, perturb=...)` is the reference recomputed in float64,
    None where it cannot be (reference.Reference.wide_runner). None for float64, integer and
    bool outputs. The input perturbation of `noise_of` misses the rounding of an ill-conditioned
    step inside the reference (1 - cos of nearly parallel rows on `shifted` inputs: the same
    summation order on nearly the same inputs rounds the same way); the distance from float64
    shows it, and two draws keep one lucky near-exact run from standing for it."""
    exp_items = _items(expected)
    out: list[float | None] = [None] * len(exp_items)
    if again is None:
        return out  # no values (perturbed: the meta device)
    first = wide(inputs)
    if first is None:
        return out
    again_wide = wide(inputs, perturb=Perturber(torch.Generator().manual_seed(seed)))
    for got, exact in ((expected, first), (again, again_wide)):
        got_items = _items(got)
        exact_items = _items(exact) if exact is not None else []
        if len(got_items) != len(exp_items) or len(exact_items) != len(exp_items):
            continue
        for k, (e, w) in enumerate(zip(got_items, exact_items)):
            d = _float_distance(e, w)
            if d is not None:
                out[k] = max(out[k] or 0.0, d)
    return out


def _float_distance(e: Any, w: Any) -> float | None:
    ok = (
        isinstance(e, torch.Tensor)
        and e.is_floating_point()
        and e.dtype != torch.float64
        and isinstance(w, torch.Tensor)
        and tuple(w.shape) == tuple(e.shape)
    )
    return rms_diff(e, w) if ok else None
