"""Honest kernels from the field at their original sizes on a CUDA device, under the strict,
kernelbench and tritonforge presets (run on the H200:
`pytest tests/gpu/test_field_honest_gpu.py -m gpu -s`).

Covers: every case of tests/eval/corpus/field_honest (LLM-written Triton solutions of KernelBench
level 1 and 2 problems, each recorded correct by its source) judged on `cuda` under each preset
against the manifest's expectation; every case the source recorded correct and that does not
tamper with its harness (`honest`) must be accepted under the kernelbench preset (the issue's
goal). Each verdict is printed as one JSON line (`FIELD_HONEST_GPU {...}`) with the source's
verdict, for the report; a mismatch says whether our verdict or the manifest's expectation is
wrong (the expectations of the GPU-only cases come from reading the code: `gpu_checked`).
Does not cover: the CPU interpreter (tests/eval/test_field_honest.py), concurrency and the HTTP
service (benchmarks/field_honest.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import helpers.field_honest as fh
from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.types import Problem, Status

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(not fh.data_available(), reason="no KernelBench data"),
]

CASES = fh.cases()


@pytest.fixture(scope="module")
def judge() -> Iterator[Evaluator]:
    with Evaluator(EvalSettings(device="cuda")) as ev:
        yield ev


@pytest.fixture(scope="module")
def original() -> dict[str, Problem]:
    return fh.problems(CASES, "original")


@pytest.mark.parametrize("preset", fh.PRESETS)
@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_field_honest_on_gpu(
    judge: Evaluator, original: dict[str, Problem], case: dict[str, Any], preset: str
) -> None:
    v = judge.evaluate(original[case["file"]], case["source"], EvalSettings.from_preset(preset))
    row = {"file": case["file"], "preset": preset, "status": v.status.value, "rule": v.rule,
           "speedup": v.model_dump(mode="json")["speedup"], "source_verdict": case["source_verdict"],
           "source_speedup": case["source_speedup"], "message": v.message[:300]}  # fmt: skip
    print("FIELD_HONEST_GPU " + json.dumps(row, allow_nan=False, default=str))
    status, rule = fh.expected(case, preset, "cuda")
    detail = f"{case['file']} {preset}: {v.status.value} rule={v.rule}\n{v.message[:800]}"
    if case["honest"] and preset == "kernelbench":
        assert v.status is Status.CORRECT, "an honest kernel its source accepted: " + detail
    assert v.status is Status(status) and v.rule == rule, detail
