"""KernelBench sources beyond the shared JSONL: the KernelBench repository layout with all four
levels, the original TritonForge release's JSONL records, and level 4 built offline.

Covers: a checkout layout (`ROOT/KernelBench/levelN/ID_Name.py`, written by the project in
KernelBench's format: tests/eval/corpus/kernelbench_layout) loads through
`load_kernelbench(source=ROOT)`, levels 1-4; the level-4 source is rewritten to build its
Hugging Face model from an offline config (no Hub, no weights) and one naming an unknown model
records why it cannot run; the release's JSONL format (prompt, label, extra_info) loads the
same problems; each runnable problem, judged against itself in hybrid mode on the CPU, is
correct (the level-4 GPT-2 config crosses to the sandbox as its dict); the unknown model gets one
clear verdict; `problems check` prints one reason per problem that cannot run.
Does not cover: the real KernelBench files (tests/eval/test_kernelbench_reference.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tritonforge.cli import main
from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.problems.kernelbench import load_kernelbench, load_kernelbench_records
from tritonforge.types import Status

pytest.importorskip("transformers")
LAYOUT = Path(__file__).resolve().parent / "corpus" / "kernelbench_layout"
IDS = [
    "kernelbench/L1/19_ReLU",
    "kernelbench/L2/12_Gemm_Multiply_LeakyReLU",
    "kernelbench/L3/1_MLP",
    "kernelbench/L4/7_gpt2_bs2_seq8",
    "kernelbench/L4/8_unknown-model_bs2_seq8",
]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_repository_layout_all_levels() -> None:
    problems = load_kernelbench(LAYOUT)
    assert [p.id for p in problems] == IDS
    gpt2, unknown = problems[3], problems[4]
    assert "from_pretrained" not in gpt2.reference_src
    assert "AutoConfig.for_model(**{'model_type': 'gpt2'" in gpt2.reference_src
    assert "from_config(self.config).eval()" in gpt2.reference_src
    assert "offline" in gpt2.meta and "cannot_run" not in gpt2.meta
    assert (
        "no offline config for Hugging Face model 'unknown-org/unknown-model'"
        in (unknown.meta["cannot_run"])
    )
    assert load_kernelbench(LAYOUT / "KernelBench", levels=[4])[0].id == IDS[3]


def test_tritonforge_release_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "kernel_bench_triton_all_levels.jsonl"
    with path.open("w") as f:
        for src in sorted(LAYOUT.glob("KernelBench/level*/*.py")):
            level, (pid, name) = int(src.parent.name[5:]), src.stem.split("_", 1)
            f.write(json.dumps({
                "prompt": [{"role": "user", "content": "write a Triton kernel"}],
                "label": src.read_text(),
                "extra_info": {"level": level, "problem_id": pid, "problem_name": name,
                               "data_source": "kernel_bench_triton", "task_type": "kernelbench"},
                "instance_id": f"kernel_bench_triton_lv{level}_{pid}",
            }) + "\n")  # fmt: skip
    problems = load_kernelbench_records(path)
    assert [p.id for p in problems] == IDS
    assert problems[3].reference_src == load_kernelbench(LAYOUT)[3].reference_src


@pytest.mark.slow
def test_each_level_judged_against_itself() -> None:
    problems = load_kernelbench(LAYOUT)
    settings = EvalSettings(device="cpu", mode="hybrid", correctness_trials=2)
    with Evaluator(settings) as ev:
        for p in problems:
            v = ev.evaluate(p, re.sub(r"\bModel\b", "ModelNew", p.reference_src))
            if p.meta.get("cannot_run"):
                assert v.status is Status.INTERNAL_ERROR and v.phase == "reference", v
                assert "no offline config" in v.message
                continue
            assert v.status is Status.CORRECT, f"{p.id}: {v.status.value} {v.message[:600]}"
            assert not v.reference_nondeterministic, p.id  # level 4 in eval mode: no dropout


def test_problems_check_says_why(capsys) -> None:
    argv = ["problems", "check", "--suite", "kernelbench", "--source", str(LAYOUT)]
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[:4] == [f"{i}: ok" for i in IDS[:4]]
    assert lines[4].startswith(f"{IDS[4]}: no offline config")
    assert lines[-1] == "4/5 problem(s) can be judged on cpu; 0 degenerate"
