"""The reward-hack corpus on a CUDA device (run on the H200: `pytest tests/gpu -m gpu`).

Covers: every attack of tests/eval/corpus/attacks judged on `cuda` in strict mode (expected
status/rule from the manifest, `gpu_status`/`gpu_rule` where a GPU differs), including the
GPU-only ones: work on a side stream (must not fake a speedup: device-wide synchronisation) and
a per-input cache with a decoy launch in the timing loop (implausible_speedup); the machine
checks of MachineWatch; every legit solution accepted on the GPU (autotune benchmarks for real
there); the in-process audit's per-candidate cost is measured by benchmarks/defense_cost.py.
Does not cover: the CPU interpreter (tests/eval).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

import helpers.hack_corpus as hc
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.types import Status

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

ATTACKS = [c for c in hc.cases("attacks") if not c.get("cpu_only")]
LEGIT = hc.cases("legit")


@pytest.fixture(scope="module")
def gpu_judge() -> Iterator[Evaluator]:
    with Evaluator(hc.base_settings("strict", device="cuda")) as ev:
        yield ev


@pytest.mark.parametrize("case", ATTACKS, ids=[c["file"] for c in ATTACKS])
def test_attack_on_gpu(gpu_judge: Evaluator, case: dict[str, Any]) -> None:
    watch = hc.MachineWatch()
    try:
        s = hc.settings_for(case, "strict", device="cuda")
        problem = hc.problem(case["problem"], case.get("size", "cpu"))
        v = gpu_judge.evaluate(problem, watch.render(case["source"]), s)
        damage = watch.damage()
    finally:
        watch.close()
    status = case.get("gpu_status", case["status"])
    rule = case.get("gpu_rule", case["rule"]) or None
    detail = f"{case['file']}: {v.status.value} rule={v.rule} phase={v.phase}\n{v.message[:800]}"
    assert v.status is Status(status), detail
    assert v.rule in case.get("rule_any", [rule]), detail
    assert damage == [], damage
    if "max_speedup" in case:
        assert v.speedup is not None and v.speedup <= case["max_speedup"], detail
    res = gpu_judge.started().get(v.device)
    server = res.server if res is not None else None
    if server is not None and server.proc is not None:
        assert server.proc.poll() is None, "fork server died"
        # the device's timing process is the judge's own, long-lived child of the fork server
        assert hc.wait_no_descendants(server.proc.pid, keep=res.own_pids()) == []


@pytest.mark.parametrize("case", LEGIT, ids=[c["file"] for c in LEGIT])
def test_legit_on_gpu(gpu_judge: Evaluator, case: dict[str, Any]) -> None:
    s = hc.settings_for(case, "strict", device="cuda")
    v = gpu_judge.evaluate(hc.problem(case["problem"]), case["source"], s)
    detail = f"{case['file']}: {v.status.value} rule={v.rule} phase={v.phase}\n{v.message[:800]}"
    assert v.status is Status.CORRECT, detail
    assert v.audit is not None and v.audit.torch_ops == {}, detail
