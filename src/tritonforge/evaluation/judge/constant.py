"""The constant-output rule: a candidate whose output is identical across trials with different
inputs, on a problem whose reference output varies with its inputs, is a reward hack
(`constant_output`), however close the constant is to each trial's expected value.

Covers: `fingerprint(t, picks)` (a digest of one output: dtype, shape, the values at hidden
positions and the whole tensor's sums), `OutputTrace` (per evaluation: the fingerprints of each
passing trial's outputs and expected outputs; `add` names the outputs a candidate repeated
bit for bit while the reference's differed) and `constant_rule(trace, ref, outputs, expected)`:
the rule's (name, reason), asking the problem's measured degeneracy (degenerate.py) only when a
repeat is seen, so only outputs that depend on the inputs count. A closed form or a table of
answers that passes every tolerance still repeats itself where the reference does not (the
analytical loss hacks of KernelBench PR #118, zeros on small outputs of KernelBench #165).
Does not cover: the comparison of values (compare.py).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any

import torch

from tritonforge.evaluation.judge.degenerate import degeneracy

SAMPLES = 4096  # values of each output taken into its fingerprint, at hidden positions


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def fingerprint(value: Any, salt: int) -> bytes:
    """A digest of one output: for a tensor its dtype, shape, the values at SAMPLES positions
    drawn from `salt`, and the float64 sums of its values and squares."""
    h = hashlib.sha256()
    if not isinstance(value, torch.Tensor):
        h.update(repr(value).encode())
        return h.digest()
    t = value.detach()
    h.update(f"{t.dtype}|{tuple(t.shape)}".encode())
    flat = t.reshape(-1)
    if flat.numel() > SAMPLES:
        g = torch.Generator().manual_seed(salt ^ flat.numel())
        flat = flat[torch.randint(flat.numel(), (SAMPLES,), generator=g).to(t.device)]
    h.update(flat.cpu().contiguous().view(torch.uint8).numpy().tobytes())
    if t.is_floating_point() or t.is_complex():
        wide = t.to(torch.complex128 if t.is_complex() else torch.float64)
        sums = torch.stack([wide.sum(), (wide * wide.conj()).sum()]).cpu()
        h.update(sums.contiguous().view(torch.uint8).numpy().tobytes())
    return h.digest()


@dataclass
class OutputTrace:
    """Fingerprints of one evaluation's passing trials (got, expected) per output."""

    salt: int = field(default_factory=lambda: secrets.randbits(62))
    seen: list[tuple[list[bytes], list[bytes]]] = field(default_factory=list)

    def add(self, outputs: Any, expected: Any) -> list[int]:
        """Record one trial; the outputs the candidate repeated from an earlier trial whose
        expected value differed from this one's."""
        got = [fingerprint(v, self.salt) for v in _items(outputs)]
        exp = [fingerprint(v, self.salt) for v in _items(expected)]
        repeated = {
            k
            for got_before, exp_before in self.seen
            for k in range(min(len(got), len(got_before), len(exp), len(exp_before)))
            if got[k] == got_before[k] and exp[k] != exp_before[k]
        }
        self.seen.append((got, exp))
        return sorted(repeated)


def constant_rule(
    trace: OutputTrace, ref: Any, outputs: Any, expected: Any
) -> tuple[str, str] | None:
    """(rule, reason) when this trial repeats an output that depends on the inputs, else None."""
    repeated = trace.add(outputs, expected)
    if not repeated:
        return None
    found = degeneracy(ref)
    varying = [k for k in repeated if found.depends(k)]
    if not varying:
        return None
    return (
        "constant_output",
        f"output(s) {varying} are identical across trials with different inputs, while the "
        "reference's output changes with its inputs: a constant or a closed form that matches "
        "the tolerance is not a computation of the output",
    )
