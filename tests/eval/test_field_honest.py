"""Honest kernels from the field (tests/eval/corpus/field_honest), judged on the CPU interpreter at
CPU sizes under the strict, kernelbench and tritonforge presets.

Covers: the manifest (every file present with its repository, commit, licence, the source's
verdict and our expectations per preset, a reason wherever ours differs from the source's, the
licence notice kept next to the files); each case whose problem scales to the CPU, under each
preset, gets the verdict the manifest expects on the CPU: the GPU expectation ("same"), or the
CPU-only outcome it names (kernels that assert CUDA inputs, a mask Triton's interpreter cannot
evaluate). The default tier judges the cases marked `cpu_tier = "default"` (a reward-hack by
patching torch.allclose, one patching nn.Dropout, a PyTorch-only rewrite, a cuDNN convolution
with a Triton epilogue); the rest run in the slow tier. Skips without the shared KernelBench
data. Does not cover: original sizes on a GPU (tests/gpu/test_field_honest_gpu.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import helpers.field_honest as fh
from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.types import Problem, Status

pytestmark = pytest.mark.skipif(not fh.data_available(), reason="no KernelBench data")

CASES = fh.cases()
RUNNABLE = [c for c in CASES if c["cpu"] != "skip"]


def _params(tier: str) -> list[Any]:
    out = []
    for c in RUNNABLE:
        marks = [] if c["cpu_tier"] == "default" else [pytest.mark.slow]
        if c["cpu_tier"] == tier or tier == "all":
            out += [pytest.param(c, p, id=f"{c['file']}-{p}", marks=marks) for p in fh.PRESETS]
    return out


@pytest.fixture(scope="module")
def judge() -> Iterator[Evaluator]:
    with Evaluator(EvalSettings(device="cpu")) as ev:
        yield ev


@pytest.fixture(scope="module")
def cpu_problems() -> dict[str, Problem]:
    return fh.problems(RUNNABLE, "cpu")


def test_manifest_records_the_source_and_our_reasons() -> None:
    assert len(CASES) >= 20
    assert (fh.FOLDER / "LICENSE-Distant22-KernelBench").read_text().startswith("MIT License")
    for c in CASES:
        assert {"repository", "commit", "path", "licence", "source_verdict"} <= set(c), c["file"]
        assert len(c["commit"]) == 40 and c["licence"] == "MIT"
        assert "ModelNew" in c["source"], c["file"]
        for preset in fh.PRESETS:
            assert c[preset] in {s.value for s in Status}, (c["file"], preset)
            if c[preset] != c["source_verdict"]:
                assert len(c.get("why", "")) > 40, f"{c['file']}: {preset} differs, no reason"
        if not c["honest"]:
            assert c["kernelbench"] == "reward_hack" and "why" in c


@pytest.mark.parametrize(("case", "preset"), _params("default") + _params("slow"))
def test_field_honest_on_cpu(
    judge: Evaluator, cpu_problems: dict[str, Problem], case: dict[str, Any], preset: str
) -> None:
    problem = cpu_problems.get(case["file"])
    assert problem is not None, f"{case['problem']} did not scale to the CPU"
    settings = EvalSettings.from_preset(preset, device="cpu", correctness_trials=3)
    v = judge.evaluate(problem, case["source"], settings)
    status, rule = fh.expected(case, preset, "cpu")
    detail = f"{case['file']} {preset}: {v.status.value} rule={v.rule}\n{v.message[:600]}"
    assert v.status is Status(status) and v.rule == rule, detail
    assert v.preset == preset
