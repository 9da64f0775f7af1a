"""The legitimate-but-tricky corpus (tests/eval/corpus/legit): zero false positives in strict mode.

Covers: one module-scoped strict Evaluator on the CPU interpreter judging every legit solution
(several kernels, autotune, heuristics, in-place writes into its own buffers, nn.Module
parameters and submodules, glue ops, non-contiguous inputs, launch loops, tuple and 0-d and
int64 outputs, jit helpers, constexpr and tuple arguments, state that is not a cached result,
stdlib helpers that use frames); each must be `correct` with no rule, have launched kernels, and
run no PyTorch compute op (custom_share 1). Does not cover: attacks (test_attacks.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import helpers.hack_corpus as hc
from tritonforge.evaluation.judge.checks import run_static
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.types import Status

pytestmark = pytest.mark.slow

LEGIT = hc.cases("legit")


@pytest.fixture(scope="module")
def strict() -> Iterator[Evaluator]:
    with Evaluator(hc.base_settings("strict")) as ev:
        yield ev


def test_corpus_size() -> None:
    assert len(LEGIT) >= 15


@pytest.mark.parametrize("case", LEGIT, ids=[c["file"] for c in LEGIT])
def test_static_rules_pass(case: dict[str, Any]) -> None:
    r = run_static(case["source"], "strict", "triton")
    assert r.status is None, f"{case['file']}: {r.rule}: {r.message}"


@pytest.mark.parametrize("case", LEGIT, ids=[c["file"] for c in LEGIT])
def test_legit_accepted_in_strict_mode(strict: Evaluator, case: dict[str, Any]) -> None:
    v = strict.evaluate(hc.problem(case["problem"]), case["source"], hc.settings_for(case))
    detail = f"{case['file']}: {v.status.value} rule={v.rule} phase={v.phase}\n{v.message[:800]}"
    assert v.status is Status.CORRECT, detail
    assert v.rule is None and v.correct and v.trials_passed == v.trials_total == 3, detail
    assert v.audit is not None and v.audit.kernel_launches > 0, detail
    assert v.audit.torch_ops == {} and v.audit.violations == [], detail
    assert v.audit.custom_share == 1.0, detail
