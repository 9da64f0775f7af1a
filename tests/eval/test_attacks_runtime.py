"""The runtime layers alone: attacks judged with the static reward-hack rules switched off in this
process, so the worker's own defenses must reject them (import guard, captured codec and hashing,
signal tripwires, native-code builders, the judge's reply shape check).

Covers: every CPU case of tests/eval/corpus/attacks with a `runtime_rule`, on the CPU
interpreter in strict mode: its `runtime_status` (reward_hack by default) and rule, no machine
damage. The static rules still run (syntax, ModelNew); only their reward-hack findings are
dropped, by replacing `run_static` in the evaluator's namespace for this module's evaluator. The
issue-29 cases (t1_*) were accepted, or ended as internal_error or an unaudited crash, by the
evaluator before issue 29 with the static rules off. The earlier attacks that the import
allowlist now stops statically (`runtime_bypass`) get their refused imports rewritten as
lookups in sys.modules (helpers/import_bypass.py), so the layer each was written against (the
audit hook, tripwires, tamper checks) is still exercised. Does not cover: the full judge
(test_attacks.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import helpers.hack_corpus as hc
from helpers.import_bypass import bypass_imports, structural_only
from tritonforge.evaluation.judge import evaluator as evaluator_module
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.types import Status

pytestmark = pytest.mark.slow

CASES = [c for c in hc.cases("attacks") if "runtime_rule" in c and not c.get("gpu")]


@pytest.fixture(scope="module")
def runtime_only() -> Iterator[Evaluator]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evaluator_module, "run_static", structural_only)
        with Evaluator(hc.base_settings("strict")) as ev:
            yield ev


def test_cases_exist() -> None:
    issue29 = [c for c in CASES if "issue29_class" in c]
    assert len(issue29) >= 10
    assert {c["issue29_class"] for c in issue29} >= {1, 2, 3, 4, 5}
    assert len(CASES) - len(issue29) >= 40  # the earlier attacks, through the bypass


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_runtime_layers_reject(runtime_only: Evaluator, case: dict[str, Any]) -> None:
    source = bypass_imports(case["source"]) if case.get("runtime_bypass") else case["source"]
    watch = hc.MachineWatch()
    try:
        s = hc.settings_for(case, "strict")
        v = runtime_only.evaluate(hc.problem(case["problem"]), watch.render(source), s)
        damage = watch.damage()
    finally:
        watch.close()
    detail = f"{case['file']}: {v.status.value} rule={v.rule} phase={v.phase}\n{v.message[:800]}"
    assert v.phase != "static", detail  # the static rules really were off
    assert v.status is Status(case.get("runtime_status", "reward_hack")), detail
    assert v.rule == (case["runtime_rule"] or None), detail
    assert not v.correct, detail
    assert damage == [], f"{case['file']}: {damage}"
