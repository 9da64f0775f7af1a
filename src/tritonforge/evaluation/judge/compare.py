"""Comparing a candidate's outputs with the reference's, in the trusted judge process.

Covers: structure (number and kind of outputs), exact shape and dtype, values within per-dtype
tolerance (|got - expected| <= atol * scale + rtol * |expected|, no broadcasting), the NaN/Inf
policy, and mismatch details (max/mean abs diff, worst index with expected vs got, count of
mismatches). The absolute tolerance's `scale` per output (ATOL_SCALES): `magnitude` (every
preset) rms(expected), plus NOISE_FACTOR times the reference's noise (how far its output moves
when its inputs move by a few ulps: noise.py, measured per case): an output small beside the
work that made it keeps a tolerance its size, so zeros or a constant do not pass an absolute
tolerance on small-magnitude outputs (KernelBench issue #165), while an output that is rounding
noise of large intermediates (a mean of a normalised tensor) tolerates a few ulps of them,
never the preset's atol times them;
under every rule the absolute tolerance also gets ROUNDING_FACTOR times the reference's own
rounding error (its distance from float64: noise.rounding_error), for outputs whose fp32 value
is mostly rounding (1 - cos of nearly parallel rows);
`output_rms` max(1, rms(expected)) and `none` 1 (plain torch.allclose) are the older rules.
Does not cover: how outputs arrive (sandbox/protocol.py) or what the verdict says (evaluator.py).
"""

from __future__ import annotations

from typing import Any

import torch

from tritonforge.evaluation.judge.noise import NOISE_FACTOR, ROUNDING_FACTOR
from tritonforge.evaluation.sandbox.protocol import flatten_tensors
from tritonforge.types import Mismatch, Status


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


_TF32_OFF = ('input_precision="ieee"', "input_precision='ieee'", "allow_tf32=False")


def tf32_hint(source: str, expected: Any) -> str:
    """Feedback for the most common GPU mismatch: tl.dot on fp32 rounds its inputs to TF32.

    Empty unless the source calls tl.dot without asking for IEEE precision and an expected
    output is fp32 (on the CPU interpreter tl.dot is exact, so the judge asks only on a GPU).
    """
    if "tl.dot(" not in source or any(flag in source for flag in _TF32_OFF):
        return ""
    if not any(x.dtype == torch.float32 for x in flatten_tensors(expected)):
        return ""
    return (
        " (hint: on NVIDIA GPUs tl.dot rounds fp32 inputs to TF32 by default, about 1e-3 "
        'relative error; pass input_precision="ieee" for fp32 accuracy)'
    )


ATOL_SCALES = ("magnitude", "output_rms", "none")


def compare(
    expected: Any,
    got: Any,
    tolerance_of,  # callable: dtype name -> tolerance
    nan_policy: str = "match",
    atol: float | None = None,
    rtol: float | None = None,
    atol_scale: str = "output_rms",
    noise: list[float | None] | None = None,
    rounding: list[float | None] | None = None,
) -> tuple[Status, Mismatch | None, str]:
    """(CORRECT, None, "") or the failing status, its details and a one-line reason.
    `atol_scale`: ATOL_SCALES; `noise`: per top-level output, the reference's measured noise
    (noise.noise_of, in the output's units; magnitude only; None or absent: 0); `rounding`: per top-level output, the
    reference's own rounding error (noise.rounding_error), ROUNDING_FACTOR times of which is
    added to the absolute tolerance under every rule."""
    exp_items, got_items = _as_list(expected), _as_list(got)
    if len(exp_items) != len(got_items):
        return _count_mismatch(exp_items, got_items)
    for idx, (e, g) in enumerate(zip(exp_items, got_items)):
        if isinstance(e, torch.Tensor) != isinstance(g, torch.Tensor):
            return (
                Status.SHAPE_MISMATCH,
                Mismatch(trial=0, distribution="", output_index=idx),
                f"output {idx}: expected a {type(e).__name__}, got a {type(g).__name__}",
            )
        if not isinstance(e, torch.Tensor):
            e_t, g_t = (
                torch.tensor(float(e)),
                torch.tensor(float(g)) if isinstance(g, (int, float)) else None,
            )
            if g_t is None:
                return (
                    Status.SHAPE_MISMATCH,
                    Mismatch(trial=0, distribution="", output_index=idx),
                    f"output {idx}: expected a number",
                )
            e, g = e_t, g_t
        status, mm, why = _compare_tensor(
            e, g, idx, tolerance_of, nan_policy, atol, rtol,
            (atol_scale, _at(noise, idx), _at(rounding, idx)),
        )  # fmt: skip
        if status is not Status.CORRECT:
            return status, mm, why
    return Status.CORRECT, None, ""


def _at(values: list[float | None] | None, idx: int) -> float:
    return (values[idx] if values is not None and idx < len(values) else None) or 0.0


def _count_mismatch(exp_items: list[Any], got_items: list[Any]):
    return (
        Status.SHAPE_MISMATCH,
        Mismatch(trial=0, distribution=""),
        f"expected {len(exp_items)} outputs, got {len(got_items)}",
    )


def _base(e: torch.Tensor, g: torch.Tensor, idx: int) -> Mismatch:
    return Mismatch(
        trial=0,
        distribution="",
        output_index=idx,
        expected_shape=list(e.shape),
        got_shape=list(g.shape),
        expected_dtype=str(e.dtype).replace("torch.", ""),
        got_dtype=str(g.dtype).replace("torch.", ""),
    )


def _layout(e: torch.Tensor, g: torch.Tensor, idx: int, base: Mismatch):
    """A shape or dtype failure, or None."""
    if tuple(e.shape) != tuple(g.shape):
        return (
            Status.SHAPE_MISMATCH,
            base,
            f"output {idx}: expected shape {list(e.shape)}, got {list(g.shape)}",
        )
    if e.dtype != g.dtype:
        return (
            Status.DTYPE_MISMATCH,
            base,
            f"output {idx}: expected dtype {base.expected_dtype}, got {base.got_dtype}",
        )
    return None


# Elements compared per step: the comparison's temporaries (masks, differences) are bounded by
# this, not by the output's size (KernelBench outputs reach 8 GiB; whole-tensor temporaries held
# four more outputs' worth of device memory in the judge).
CHUNK = 1 << 24


def _chunks(t: torch.Tensor) -> list[torch.Tensor]:
    flat = t.reshape(-1)
    return [flat[i : i + CHUNK] for i in range(0, flat.numel(), CHUNK)]


def _widen(t: torch.Tensor) -> torch.Tensor:
    """fp16/bf16 compared in fp32; fp32/fp64 in their own precision (no 2x blow-up)."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def rms(e: torch.Tensor) -> float:
    """Root mean square of the finite values of `e` (0 when none), summed chunk by chunk."""
    total, count = 0.0, 0
    for c in _chunks(e):
        fin = c[torch.isfinite(c)].abs().double()
        total += float(fin.square().sum())
        count += fin.numel()
    return (total / count) ** 0.5 if count else 0.0


def output_scale(e: torch.Tensor, rule: str) -> float:
    """What the absolute tolerance is multiplied by for output `e` under `rule` (ATOL_SCALES)."""
    if rule == "none":
        return 1.0
    if rule == "output_rms":
        return max(1.0, rms(e))
    if rule == "magnitude":
        return rms(e)
    raise ValueError(f"unknown atol scale {rule!r}; known: {ATOL_SCALES}")


def tolerances(
    e: torch.Tensor, atol: float, rtol: float, rule: str, noise: float = 0.0, rounding: float = 0.0
) -> tuple[float, float, float]:
    """(absolute tolerance, relative tolerance, scale) of output `e`: atol x output_scale plus
    ROUNDING_FACTOR x the reference's rounding error under every rule; under `magnitude` also
    NOISE_FACTOR x the reference's noise, absolute and relative to the output's rms (an output
    of mixed magnitudes, a softmax of shifted logits, moves in proportion to each element:
    noise.py)."""
    scale = output_scale(e, rule)
    a_eff, r_eff = atol * scale + ROUNDING_FACTOR * rounding, rtol
    if rule == "magnitude" and noise:  # (scale is rms(e) under this rule)
        a_eff += NOISE_FACTOR * noise
        r_eff += NOISE_FACTOR * noise / scale if scale > 0 else 0.0
    return a_eff, r_eff, scale


def _compare_tensor(
    e: torch.Tensor,
    g: torch.Tensor,
    idx: int,
    tolerance_of,
    nan_policy: str,
    atol,
    rtol,
    scaling: tuple[str, float, float] = ("output_rms", 0.0, 0.0),
):
    base = _base(e, g, idx)
    layout = _layout(e, g, idx, base)
    if layout is not None:
        return layout
    g = g.to(e.device)
    if e.numel() == 0:
        return Status.CORRECT, None, ""
    if e.dtype == torch.bool or not (e.is_floating_point() or e.is_complex()):
        acc = _Worst()
        for ec, gc in zip(_chunks(e), _chunks(g)):
            acc.add(ec.float(), gc.float(), ec != gc, None)
        return acc.verdict(e, g, base, idx, "values differ")
    tol = tolerance_of(base.expected_dtype)
    a = tol if atol is None else atol
    r = tol if rtol is None else rtol
    # The absolute tolerance is relative to the output's scale (output_scale): a large-magnitude
    # output (a K=4096 matmul on 4x inputs) tolerates the summation-order noise any correct
    # fp32 kernel has near its zeros; under `magnitude` a small one keeps a tolerance its size.
    a_eff, r_eff, scale = tolerances(e, a, r, *scaling)
    acc = _Worst()
    for ec, gc in zip(_chunks(e), _chunks(g)):
        ed, gd = _widen(ec), _widen(gc)
        e_fin, g_fin = torch.isfinite(ed), torch.isfinite(gd)
        if nan_policy == "forbid":
            nonfinite = ~g_fin
        else:  # NaN where the reference has NaN, +-Inf where it has the same Inf
            same_nan = torch.isnan(ed) & torch.isnan(gd)
            same_inf = torch.isinf(ed) & (ed == gd)
            nonfinite = (~e_fin | ~g_fin) & ~(same_nan | same_inf)
        both = e_fin & g_fin
        absdiff = (ed - gd).abs()  # real even for complex outputs
        diff = torch.where(both, absdiff, torch.zeros_like(absdiff))
        bad = nonfinite | (both & (diff > a_eff + r_eff * ed.abs()))
        acc.add(ed, gd, bad, diff)
    shown = f"atol={a:g} (x{scale:.3g} output scale)" if scale != 1.0 else f"atol={a:g}"
    if a_eff > a * scale:
        shown += f" + {a_eff - a * scale:.3g} (the reference's own noise and rounding)"
    shown += f", rtol={r:g}" + (f" + {r_eff - r:.3g} (noise)" if r_eff > r else "")
    return acc.verdict(e, g, base, idx, f"values differ beyond {shown}")


class _Worst:
    """Mismatch details accumulated over chunks: count, finite |diff| max and mean, and the
    worst mismatched element (largest difference, a non-finite one first)."""

    def __init__(self) -> None:
        self.n_bad = self.n_fin = self.offset = 0
        self.sum_fin = 0.0
        self.max_fin: float | None = None
        self.worst: tuple[float, int] | None = None  # (score, flat index)

    def add(self, ed: torch.Tensor, gd: torch.Tensor, bad: torch.Tensor, diff) -> None:
        n = int(bad.sum())
        if diff is None:
            diff = (ed - gd).abs()
        finite = torch.isfinite(diff)
        fd = diff[finite]
        if fd.numel():
            top = float(fd.max())
            self.max_fin = top if self.max_fin is None else max(self.max_fin, top)
            self.sum_fin += float(fd.sum(dtype=torch.float64))
            self.n_fin += fd.numel()
        if n:
            self.n_bad += n
            score = torch.where(
                bad,
                torch.where(finite, diff, torch.full_like(diff, float("inf"))),
                torch.full_like(diff, -1.0),
            )
            at = int(torch.argmax(score))
            value = float(score[at])
            if self.worst is None or value > self.worst[0]:
                self.worst = (value, self.offset + at)
        self.offset += bad.numel()

    def verdict(self, e: torch.Tensor, g: torch.Tensor, base: Mismatch, idx: int, why: str):
        if self.n_bad == 0 or self.worst is None:
            return Status.CORRECT, None, ""
        flat = self.worst[1]
        worst = list(torch.unravel_index(torch.tensor(flat), e.shape)) if e.dim() else []
        base.max_abs_diff = self.max_fin
        base.mean_abs_diff = self.sum_fin / self.n_fin if self.n_fin else None
        base.worst_index = [int(i) for i in worst]
        if not e.is_complex():  # a complex value does not fit the float fields
            base.worst_expected = float(e.reshape(-1)[flat])
            base.worst_got = float(g.reshape(-1)[flat])
        base.mismatched = self.n_bad
        base.numel = int(e.numel())
        return (
            Status.NUMERICAL_MISMATCH,
            base,
            f"output {idx}: {self.n_bad}/{e.numel()} elements {why}",
        )


def output_bytes(value: Any) -> int:
    return sum(t.numel() * t.element_size() for t in flatten_tensors(value))


# --------------------------------------------------------------------------------------------
# Nondeterministic references: statistics instead of elements
# --------------------------------------------------------------------------------------------

STAT_NAMES = ("mean", "std", "mean |x|")


def output_stats(value: Any) -> list[tuple[float, float, float, int]]:
    """Per output tensor: (mean, std, mean |x|) over its finite values and its non-finite count."""
    out = []
    for t in flatten_tensors(_as_list(value)):
        x = t.detach().to(torch.float64).reshape(-1)
        fin = x[torch.isfinite(x)]
        if fin.numel() == 0:
            out.append((0.0, 0.0, 0.0, int(x.numel())))
            continue
        std = float(fin.std()) if fin.numel() > 1 else 0.0
        out.append((float(fin.mean()), std, float(fin.abs().mean()), int(x.numel() - fin.numel())))
    return out


def compare_stats(
    expected: Any,
    runs: list[list[tuple[float, float, float, int]]],
    got: Any,
    tolerance_of,
    floor: float = 1.0,
) -> tuple[Status, Mismatch | None, str]:
    """Judge `got` against a nondeterministic reference: the layout of `expected` (one run)
    exactly, then each output's statistics within the spread of the reference `runs`: inside
    [lowest - 2 * spread, highest + 2 * spread], widened to the dtype's tolerance times the
    statistic's scale, max(floor, |lowest|, |highest|) (floor 0: the magnitude rule, 1: the
    older rules); no more non-finite values than any run had."""
    exp_items, got_items = _as_list(expected), _as_list(got)
    if len(exp_items) != len(got_items):
        return _count_mismatch(exp_items, got_items)
    for idx, (e, g) in enumerate(zip(exp_items, got_items)):
        if not (isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor)):
            return compare(e, g, tolerance_of)  # numbers: compared as usual
        base = _base(e, g, idx)
        layout = _layout(e, g, idx, base)
        if layout is not None:
            return layout
    mine = output_stats(got)
    for idx, stats in enumerate(mine):
        tol = tolerance_of(str(exp_items[idx].dtype).replace("torch.", ""))
        for k, name in enumerate(STAT_NAMES):
            values = [r[idx][k] for r in runs]
            lo, hi = min(values), max(values)
            margin = max(2.0 * (hi - lo), tol * max(floor, abs(hi), abs(lo)))
            if not lo - margin <= stats[k] <= hi + margin:
                mm = _base(exp_items[idx], got_items[idx], idx)
                why = (
                    f"output {idx}: {name} {stats[k]:.6g} outside the range of the reference's "
                    f"{len(runs)} runs ({lo:.6g} .. {hi:.6g}, margin {margin:.3g})"
                )
                return Status.NUMERICAL_MISMATCH, mm, why
        if stats[3] > max(r[idx][3] for r in runs):
            mm = _base(exp_items[idx], got_items[idx], idx)
            return Status.NUMERICAL_MISMATCH, mm, f"output {idx}: {stats[3]} non-finite values"
    return Status.CORRECT, None, ""


def compare_to_reference(case: Any, got: Any, s: Any, problem: Any):
    """`got` against a reference case (reference.Case): element by element, or by statistics
    when the reference is nondeterministic (the case carries the statistics of its runs)."""
    if getattr(case, "stat_runs", None):
        floor = 0.0 if s.atol_scale == "magnitude" else 1.0
        return compare_stats(case.expected, case.stat_runs, got, s.tolerance, floor)
    return compare(
        case.expected,
        got,
        s.tolerance,
        s.nan_policy,
        problem.atol,
        problem.rtol,
        s.atol_scale,
        getattr(case, "noise", None),
        getattr(case, "rounding", None),
    )
