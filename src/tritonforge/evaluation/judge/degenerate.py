"""Degenerate problems, found by measurement: a reference whose output does not depend on its
inputs, or that uses none of one of its inputs.

Covers: `Degeneracy` (per output: whether it depends on the inputs; per input: whether any
output depends on it; a one-line reason), `measure(ref)`: DRAWS independent draws of the
problem's own inputs (native, fixed seeds: a property of the problem, not of a candidate), the
reference run on each, and each input redrawn alone with the others kept; an output "does not
change" when no draw moves it by more than NOISE_FACTOR times its rounding noise (how far it
moves when the inputs move by a few ulps: noise.Perturber; an output of exact arithmetic has
none, so a change of any size counts). Every run holds torch's generators at one seed, so a
dropout mask is the same in every run. A draw that repeats the problem's inputs (a get_inputs
without randomness) is replaced by the same draw shifted (distributions.py); inputs that vary
in neither way make every output constant for the judge too, and are reported so.
`degeneracy(ref)` measures once per loaded reference (kept on it) under the reference's lock
and the judge's device access; the judge notes it on every verdict and gives a degenerate
problem no speedup reward (Verdict.degenerate, rollout/rewards.py); `tritonforge problems check`
reports it. Findings compared with KernelBench's open PR #108 (L2 23, 80 and 83 constant) are
in docs/degenerate_problems.md.
Does not cover: outputs that depend on only a part of an input (not measured), the constant-
output rule of candidates (constant.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tritonforge.evaluation.judge.gpu_lock import judge_device
from tritonforge.evaluation.judge.noise import Perturber
from tritonforge.evaluation.judge.rng import every_generator, seeded
from tritonforge.evaluation.sandbox.protocol import flatten_tensors
from tritonforge.logging_setup import get_logger

log = get_logger("evaluation.degenerate")

DRAWS = 3  # independent draws of the inputs; the first is the base
NOISE_FACTOR = 64.0  # a change within this many times an output's rounding noise is no change
DRAW_SEED = 0xDE6E  # the draws' seeds (fixed: degeneracy is a property of the problem)
RUN_SEED = 7  # torch's generators during every run (one dropout mask for all)


@dataclass(frozen=True)
class Degeneracy:
    """What the measurement found: outputs constant over the draws, inputs no output uses."""

    n_outputs: int = 0
    n_inputs: int = 0
    constant_outputs: tuple[int, ...] = ()
    unused_inputs: tuple[int, ...] = ()
    reason: str = ""  # one line: what was measured, for degenerate problems
    error: str = ""  # the measurement failed (then nothing is known)

    @property
    def degenerate(self) -> bool:
        return bool(self.constant_outputs or self.unused_inputs)

    def depends(self, output: int) -> bool:
        """Whether output `output` was seen to depend on the inputs (or could not be measured)."""
        return output not in self.constant_outputs


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def change(a: Any, b: Any) -> float:
    """The largest |a - b| of two values of one output (inf: shape, kind or NaN places differ)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape:
            return float("inf")
        wide = torch.complex128 if a.is_complex() or b.is_complex() else torch.float64
        x, y = a.detach().to(wide).reshape(-1), b.detach().to(a.device).to(wide).reshape(-1)
        if not torch.equal(torch.isnan(x), torch.isnan(y)):
            return float("inf")
        both = torch.isfinite(x) & torch.isfinite(y)
        if not torch.equal(x[~both], y[~both]):  # infinities at different places or signs
            return float("inf")
        return float((x[both] - y[both]).abs().max()) if bool(both.any()) else 0.0
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(float(a) - float(b))
    return 0.0 if a == b else float("inf")


def _same_inputs(a: list[Any], b: list[Any]) -> bool:
    ta, tb = flatten_tensors(a), flatten_tensors(b)
    return len(ta) == len(tb) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(ta, tb)
    )


class _Runner:
    """The reference's runs of one measurement, all under torch's generators at RUN_SEED."""

    def __init__(self, ref: Any):
        self.ref = ref
        self.hold = every_generator(ref.device)

    def run(self, inputs: list[Any], perturb: Any = None) -> list[Any]:
        out, _ = seeded(lambda: self.ref.run(inputs, perturb=perturb), RUN_SEED, self.hold)
        return _items(out)

    def draw(self, index: int, base: list[Any] | None) -> list[Any]:
        seed = DRAW_SEED + index
        x = self.ref.draw_inputs(seed, "native")
        if base is not None and _same_inputs(x, base):
            x = self.ref.draw_inputs(seed, "shifted")
        return x


def measure(ref: Any) -> Degeneracy:
    """Measure `ref` (a reference.Reference); see the module docstring."""
    runner = _Runner(ref)
    base_in = runner.draw(0, None)
    base = runner.run(base_in)
    again = runner.run(base_in, perturb=Perturber(torch.Generator().manual_seed(DRAW_SEED)))
    noise = [change(a, b) if len(again) == len(base) else 0.0 for a, b in zip(base, again)]
    limit = [NOISE_FACTOR * n for n in noise]
    seen = [0.0] * len(base)
    draws = [runner.draw(i, base_in) for i in range(1, DRAWS)]
    for x in draws:
        seen = [max(s, change(b, o)) for s, b, o in zip(seen, base, runner.run(x))]
    constant = tuple(k for k in range(len(base)) if seen[k] <= limit[k])
    unused = _unused_inputs(runner, base_in, base, draws, limit)
    reason = _reason(constant, unused, seen, noise)
    if constant and all(_same_inputs(x, base_in) for x in draws):
        reason = "the problem's inputs do not vary between draws (nor shifted): " + reason
    return Degeneracy(len(base), len(base_in), constant, unused, reason)


def _unused_inputs(
    runner: _Runner, base_in: list[Any], base: list[Any], draws: list[list[Any]], limit: list[float]
) -> tuple[int, ...]:
    """Inputs whose own redraws (the others kept) change no output beyond its limit. With a
    single tensor input the full redraws have already answered."""
    slots = [i for i, v in enumerate(base_in) if flatten_tensors([v])]
    if len(slots) < 2:
        return ()
    unused = []
    for i in slots:
        moved, varied = False, False
        for x in draws:
            if _same_inputs([x[i]], [base_in[i]]):
                continue  # this input never varies: nothing to learn from it
            varied = True
            mixed = list(base_in)
            mixed[i] = x[i]
            out = runner.run(mixed)
            if any(change(b, o) > lim for b, o, lim in zip(base, out, limit)):
                moved = True
                break
        if varied and not moved:
            unused.append(i)
    return tuple(unused)


def _reason(
    constant: tuple[int, ...], unused: tuple[int, ...], seen: list[float], noise: list[float]
) -> str:
    parts = [
        f"output {k} does not depend on the inputs ({DRAWS} independent draws move it by at "
        f"most {seen[k]:.3g}, within {NOISE_FACTOR:g}x its rounding noise {noise[k]:.3g})"
        for k in constant
    ]
    parts += [
        f"input {i} is unused (redrawing it alone moves no output beyond {NOISE_FACTOR:g}x its "
        "rounding noise)"
        for i in unused
    ]
    return "; ".join(parts)


def degeneracy(ref: Any) -> Degeneracy:
    """`measure(ref)` once per loaded reference (kept on `ref.degeneracy`); a measurement that
    fails is recorded as unknown (not degenerate), never raised."""
    found = getattr(ref, "degeneracy", None)
    if found is not None:
        return found
    with ref.lock, judge_device(ref.device):
        found = getattr(ref, "degeneracy", None)
        if found is None:
            try:
                found = measure(ref)
            except Exception as exc:  # e.g. the reference fails on a redraw: nothing known
                log.warning("degeneracy of %s not measured: %s", ref.problem.id, exc)
                found = Degeneracy(error=f"{type(exc).__name__}: {exc}"[:300])
            ref.degeneracy = found
    return found
