"""The `variants` suite: built-in elementwise problems re-spelled, for RL and held-out measurement.

Covers: `VARIANTS` (each a new name, docstring and `forward` expression for one of the built-in
elementwise problems), `load_variants` (Problems whose reference is the base problem's source at
the chosen size with the forward re-spelled, e.g. `torch.sigmoid(x)` written as
`1.0 / (1.0 + torch.exp(-x))`, and whose `solution_src` is the base problem's Triton solution,
which computes the same function) and the registration as suite "variants". `category` is the
split: "sft" (spellings whose pairs may be SFT data), "rl" (prompts to train on with RL only)
or "heldout" (measured only).
Does not cover: judging (see evaluation) or training data (see jobs.sft_data). In the demo
the "rl" and "heldout" prompts never appear in SFT data: the correct kernel is one the model was
taught for another spelling, so what RL must learn there is which kernel a new spelling needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tritonforge.problems import register_suite
from tritonforge.types import Problem

__all__ = ["VARIANTS", "Variant", "load_variants", "respell"]

_NUMBER_BASE = 100  # problem numbers of the suite start here (the built-in ones end below 100)


@dataclass(frozen=True)
class Variant:
    """One re-spelled problem: `expr` replaces the return expression of the base's forward."""

    name: str
    base: str
    split: str  # "sft" | "rl" | "heldout"
    expr: str
    doc: str


_F = "torch.nn.functional"
_SLOPE = "self.negative_slope"

# Per base problem: two spellings for SFT data, two for RL, one held out (measured only).
VARIANTS: tuple[Variant, ...] = (
    Variant("relu_functional", "relu", "sft", f"{_F}.relu(x)", "Rectified linear unit."),
    Variant(
        "rectifier", "relu", "sft", "torch.clamp_min(x, 0.0)", "Keeps positives, zeroes the rest."
    ),
    Variant("relu_clamp", "relu", "rl", "torch.clamp(x, min=0.0)", "Clamps negatives to zero."),
    Variant(
        "relu_where", "relu", "rl", "torch.where(x > 0, x, torch.zeros_like(x))", "Zero below 0."
    ),
    Variant("relu_max", "relu", "heldout", "torch.maximum(x, torch.zeros_like(x))", "Max with 0."),
    Variant("sigmoid_functional", "sigmoid", "sft", f"{_F}.sigmoid(x)", "Sigmoid function."),
    Variant("sigmoid_method", "sigmoid", "sft", "x.sigmoid()", "Sigmoid as a tensor method."),
    Variant("logistic", "sigmoid", "rl", "1.0 / (1.0 + torch.exp(-x))", "The logistic function."),
    Variant(
        "sigmoid_reciprocal",
        "sigmoid",
        "rl",
        "torch.reciprocal(1.0 + torch.exp(-x))",
        "Reciprocal of 1 + e^-x.",
    ),
    Variant("expit", "sigmoid", "heldout", "torch.special.expit(x)", "The expit function."),
    Variant("silu_functional", "silu", "sft", f"{_F}.silu(x)", "Sigmoid linear unit."),
    Variant("silu_method", "silu", "sft", "x * x.sigmoid()", "x times its sigmoid."),
    Variant("swish", "silu", "rl", f"x * {_F}.sigmoid(x)", "Swish activation."),
    Variant(
        "swish_logistic", "silu", "rl", "x * (1.0 / (1.0 + torch.exp(-x)))", "x * logistic(x)."
    ),
    Variant("silu_division", "silu", "heldout", "x / (1.0 + torch.exp(-x))", "x over 1 + e^-x."),
    Variant("tanh_functional", "tanh", "sft", f"{_F}.tanh(x)", "Hyperbolic tangent."),
    Variant("tanh_method", "tanh", "sft", "x.tanh()", "Hyperbolic tangent as a method."),
    Variant(
        "tanh_from_sigmoid", "tanh", "rl", "2.0 * torch.sigmoid(2.0 * x) - 1.0", "tanh via sigmoid."
    ),
    Variant("tanh_module", "tanh", "rl", "torch.nn.Tanh()(x)", "Tanh through its module."),
    Variant("tanh_special", "tanh", "heldout", "torch.special.expit(2.0 * x) * 2.0 - 1.0", "tanh."),
    Variant(
        "hardtanh_clamp",
        "hardtanh",
        "sft",
        "torch.clamp(x, min=self.min_val, max=self.max_val)",
        "Clamps the input to a range.",
    ),
    Variant(
        "hardtanh_method", "hardtanh", "sft", "x.clamp(self.min_val, self.max_val)", "Clamp method."
    ),
    Variant(
        "clip_range",
        "hardtanh",
        "rl",
        "torch.clip(x, self.min_val, self.max_val)",
        "Clips to a range.",
    ),
    Variant(
        "hardtanh_module",
        "hardtanh",
        "rl",
        "torch.nn.Hardtanh(self.min_val, self.max_val)(x)",
        "Hard tanh through its module.",
    ),
    Variant(
        "hardtanh_minmax",
        "hardtanh",
        "heldout",
        "torch.minimum(torch.maximum(x, torch.full_like(x, self.min_val)), "
        "torch.full_like(x, self.max_val))",
        "Hard tanh from minimum and maximum.",
    ),
    Variant(
        "leaky_relu_where",
        "leaky_relu",
        "sft",
        f"torch.where(x >= 0, x, x * {_SLOPE})",
        "Leaky ReLU.",
    ),
    Variant(
        "leaky_relu_module",
        "leaky_relu",
        "sft",
        f"torch.nn.LeakyReLU({_SLOPE})(x)",
        "Leaky ReLU through its module.",
    ),
    Variant(
        "leaky_where",
        "leaky_relu",
        "rl",
        f"torch.where(x > 0, x, {_SLOPE} * x)",
        "Leaky rectifier.",
    ),
    Variant(
        "leaky_functional",
        "leaky_relu",
        "rl",
        f"{_F}.leaky_relu(x, {_SLOPE})",
        "Leaky ReLU, positional slope.",
    ),
    Variant(
        "leaky_max",
        "leaky_relu",
        "heldout",
        f"torch.maximum(x, x * {_SLOPE})",
        "Leaky max (slope < 1).",
    ),
)

_FORWARD_RETURN = re.compile(r"(    def forward\(self[^\n]*\n(?:[^\n]*\n)*?        return )[^\n]+")
_CLASS_DOC = re.compile(r'(class Model\(nn\.Module\):\n    """)[^\n]*(""")')


def respell(reference_src: str, expr: str, doc: str) -> str:
    """`reference_src` with the return expression of `Model.forward` and the class docstring
    replaced; ValueError when either is not found exactly once."""
    out, n_ret = _FORWARD_RETURN.subn(lambda m: m.group(1) + expr, reference_src, count=1)
    out, n_doc = _CLASS_DOC.subn(lambda m: m.group(1) + doc + m.group(2), out, count=1)
    if n_ret != 1 or n_doc != 1:
        raise ValueError(f"cannot re-spell the reference (return found {n_ret}, docstring {n_doc})")
    return out


def load_variants(size: str = "cpu") -> list[Problem]:
    """Every variant at the built-in size preset `size`, in `VARIANTS` order."""
    from tritonforge.problems import load_suite

    bases = {p.name: p for p in load_suite("builtin", size=size)}
    out = []
    for i, v in enumerate(VARIANTS):
        base = bases[v.base]
        out.append(
            base.model_copy(
                update={
                    "id": f"variants/{v.name}",
                    "suite": "variants",
                    "name": v.name,
                    "category": v.split,
                    "problem_id": _NUMBER_BASE + i,
                    "reference_src": respell(base.reference_src, v.expr, v.doc),
                    "meta": {"base": base.id, "split": v.split, "expr": v.expr},
                }
            )
        )
    return out


register_suite("variants", load_variants)
