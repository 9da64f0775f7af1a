"""Input distributions of the judge's hidden trials: how one drawn input is transformed.

Covers: `DISTRIBUTIONS`; `kind_of(x)`, what an input is, read from the problem's own draw:
`exact` (integer, bool or complex: indices, masks), `discrete` (floats with a few integral
values: labels such as +-1, one-hot rows), `simplex` (non-negative rows summing to 1:
probabilities, as KL divergence takes), `positive` (log, sqrt and variance arguments), `nonneg`
and `real`; and `transform(x, dist, gen, spread)`, which keeps each kind's constraint:
- native: unchanged (the problem's get_inputs under a hidden seed).
- shifted: a large mean beside the spread: x + c (x * a + c for non-negative inputs), c
  between 500 and 1500 times max(rms(x), 1) in fp32/fp64 (16-48 and 8-24 times rms(x) in fp16
  and bf16, whose precision would erase the spread): closed forms of the native draw fail, and
  so do kernels that are exact only near zero (a softmax without its row maximum overflows; a
  one-pass variance E[x^2] - E[x]^2 cancels: its error grows with c^2, the tolerance, scaled by
  the reference's own noise, with c; at c = 300 it still passes). Probabilities get a small
  shift (then renormalised).
- scaled: x * 4 (a sharper p**2 for probabilities).
- heavy: heavy-tailed, as KernelBench's own fix of the loss problems (its PR #118, Pareto
  inputs): every element times an independent Pareto(1.5) factor, and a few elements at random
  positions (4 to 8) times a spike factor. Both grow with the problem's `spread` (input bytes over output
  bytes: how many inputs each output aggregates), so that a closed form or a subsample of an
  aggregate gives itself away, while elementwise problems get factors like `scaled`'s. Factors
  are capped per dtype (fp16 32, bf16 1e4, fp32/fp64 1e8).
- positive: |x| + 0.05.
Probabilities are renormalised after every transform; exact and discrete inputs never change;
every transform keeps the input's memory layout (strides), which is part of the problem.
Does not cover: drawing the inputs under hidden seeds (reference.py), the comparison
(compare.py).
"""

from __future__ import annotations

import torch

DISTRIBUTIONS = ("native", "heavy", "shifted", "scaled", "positive")
KINDS = ("exact", "discrete", "simplex", "positive", "nonneg", "real")

PARETO_ALPHA = 1.5
IID_MAX = 1e3  # the largest per-element factor, before the dtype's cap
SPIKE_PER_SPREAD = 4.0  # spike factor = this x spread (at least this)
SPIKES = (4, 8)  # spiked elements per input, at least and at most
_CAPS = {torch.float16: 32.0, torch.bfloat16: 1e4}
# shifted: per dtype, the offset's low end (x rms) and the rms it is at least taken as; fp16
# and bf16 keep their spread (ulps of 1/32 to 1/8 at the offset), fp32/fp64 go far past exp's
# overflow (88) and far enough for E[x^2] - E[x]^2 to lose the variance
_OFFSETS = {torch.float16: (16.0, 0.05), torch.bfloat16: (8.0, 0.05)}
_FP32_CAP = 1e8
_CHUNK = 1 << 24  # elements transformed per step (bounded temporaries on large inputs)
_DISCRETE_VALUES = 8  # at most this many distinct integral values: labels, masks, one-hot
_SAMPLE = 4096


def kind_of(x: torch.Tensor) -> str:
    """Which constraint the transforms must keep for this input (KINDS)."""
    if not x.is_floating_point() or x.numel() == 0 or x.is_meta:
        return "exact"  # integers, bool, complex (and the meta device: no values)
    if _discrete(x):
        return "discrete"
    if not bool((x >= 0).all()):
        return "real"
    if _simplex(x):
        return "simplex"
    return "positive" if bool((x > 0).all()) else "nonneg"


def _discrete(x: torch.Tensor) -> bool:
    flat = x.reshape(-1)
    step = max(1, flat.numel() // _SAMPLE)
    sample = flat[::step]
    if torch.unique(sample).numel() > _DISCRETE_VALUES:
        return False
    return bool((x == torch.round(x)).all())


def _simplex(x: torch.Tensor) -> bool:
    """Non-negative rows of at least two entries that each sum to 1."""
    if x.dim() == 0 or x.shape[-1] < 2:
        return False
    slack = 1e-3 if x.dtype in (torch.float32, torch.float64) else 2e-2
    sums = x.float().sum(dim=-1)
    return bool(((sums - 1.0).abs() <= slack).all())


def cap(dtype: torch.dtype) -> float:
    """The largest factor a transform multiplies an element of `dtype` by."""
    return _CAPS.get(dtype, _FP32_CAP)


def transform(
    x: torch.Tensor, dist: str, gen: torch.Generator, spread: float = 1.0
) -> torch.Tensor:
    """`x` under distribution `dist`, its kind's constraint kept (a new tensor, or `x` itself
    when unchanged). `gen`: the case's private CPU generator; `spread`: the problem's input
    bytes over its output bytes (heavy only)."""
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {dist!r}; known: {DISTRIBUTIONS}")
    if dist == "native":
        return x
    kind = kind_of(x)
    if kind in ("exact", "discrete"):
        return x
    u = float(torch.rand((), generator=gen))
    if kind == "simplex":
        return _renormalise(_simplex_transform(x.float(), dist, gen, u, spread)).to(x.dtype)
    if dist == "shifted":
        c = _offset(x, u)
        return x * (1.0 + u) + c if kind != "real" else x + c
    if dist == "scaled":
        return x * 4.0
    if dist == "positive":
        return x.abs() + 0.05
    return heavy(x, gen, spread)


def _offset(x: torch.Tensor, u: float) -> float:
    """The shift of a `shifted` draw: large beside the input's spread, within its precision."""
    lo, scale_floor = _OFFSETS.get(x.dtype, (500.0, 1.0))
    flat = x.reshape(-1)
    sample = flat[:: max(1, flat.numel() // _SAMPLE)].double()
    rms = float(sample.pow(2).mean().sqrt()) if sample.numel() else 1.0
    if not rms == rms or rms == float("inf"):  # (nan/inf inputs: a plain offset)
        rms = 1.0
    return lo * (1.0 + 2.0 * u) * max(rms, scale_floor)


def _simplex_transform(
    p: torch.Tensor, dist: str, gen: torch.Generator, u: float, spread: float
) -> torch.Tensor:
    if dist == "shifted":
        return p * (1.0 + u) + (0.25 + u) / p.shape[-1]
    if dist == "scaled":
        return p * p
    if dist == "positive":
        return p + 0.05 / p.shape[-1]
    return heavy(p, gen, spread)


def _renormalise(p: torch.Tensor) -> torch.Tensor:
    return p / p.sum(dim=-1, keepdim=True)


def heavy(x: torch.Tensor, gen: torch.Generator, spread: float) -> torch.Tensor:
    """x times independent Pareto(PARETO_ALPHA) factors in [1, iid_max], then SPIKES elements
    at random positions times the spike factor instead (signs and zeros kept). Several spikes:
    a subsample that keeps a fraction f of the elements matches the aggregate only if it keeps
    f of the spikes that count (an op such as a clamp may zero some)."""
    top = cap(x.dtype)
    iid_max = min(max(spread, 4.0), IID_MAX, top)
    spike = min(max(SPIKE_PER_SPREAD * spread, SPIKE_PER_SPREAD), top)
    u_min = iid_max ** (-PARETO_ALPHA)  # u = u_min gives the largest factor
    device_gen = torch.Generator(device=x.device)
    device_gen.manual_seed(int(torch.randint(1 << 62, (), generator=gen)))
    src = x.contiguous().reshape(-1)
    out = torch.empty_like(src)
    wide = torch.float64 if x.dtype == torch.float64 else torch.float32
    for i in range(0, src.numel(), _CHUNK):
        part = src[i : i + _CHUNK]
        r = torch.rand(part.shape, generator=device_gen, device=x.device, dtype=torch.float32)
        factor = (r * (1.0 - u_min) + u_min).pow_(-1.0 / PARETO_ALPHA)
        out[i : i + _CHUNK] = (part.to(wide) * factor.to(wide)).to(x.dtype)
        del r, factor
    n = int(torch.randint(SPIKES[0], SPIKES[1] + 1, (), generator=gen))
    where = torch.randint(src.numel(), (n,), generator=gen).to(x.device)
    out[where] = (src[where].to(wide) * spike).to(x.dtype)  # the spike replaces the factor
    if x.is_contiguous():
        return out.reshape(x.shape)
    kept = torch.empty_like(x)  # the problem's memory layout is part of the problem: kept
    kept.copy_(out.reshape(x.shape))
    return kept
