"""The `variants` suite: re-spelled references, disjoint splits, the base solution as answer."""

from __future__ import annotations

import ast

import pytest

from tritonforge.problems import load_suite, select
from tritonforge.problems.variants import VARIANTS, respell


def test_variants_respell_only_forward_and_doc() -> None:
    builtin = {p.name: p for p in load_suite("builtin", size="cpu")}
    probs = load_suite("variants", size="cpu")
    assert [p.name for p in probs] == [v.name for v in VARIANTS]
    assert len({p.id for p in probs}) == len(probs) and not {p.name for p in probs} & set(builtin)
    for p, v in zip(probs, VARIANTS):
        base = builtin[v.base]
        ast.parse(p.reference_src)
        assert f"return {v.expr}\n" in p.reference_src and v.doc in p.reference_src
        assert p.reference_src != base.reference_src
        assert p.solution_src == base.solution_src and p.category == v.split
        # the rest of the file (sizes, get_inputs, get_init_inputs) is the base problem's
        assert (
            p.reference_src.split("batch_size =")[1] == base.reference_src.split("batch_size =")[1]
        )


def test_each_base_has_sft_rl_and_heldout_spellings() -> None:
    probs = load_suite("variants", size="cpu")
    for split, per_base in (("sft", 2), ("rl", 2), ("heldout", 1)):
        chosen = select(probs, category=split)
        bases = [p.meta["base"] for p in chosen]
        assert len(bases) == 6 * per_base and all(bases.count(b) == per_base for b in set(bases))
    assert {v.expr for v in VARIANTS if v.split == "rl"}.isdisjoint(
        v.expr for v in VARIANTS if v.split != "rl"
    )


def test_respell_refuses_sources_it_cannot_find() -> None:
    with pytest.raises(ValueError):
        respell("x = 1\n", "torch.relu(x)", "doc")
