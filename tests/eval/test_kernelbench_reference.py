"""KernelBench references judged against themselves: the evaluator is consistent on real problems.

Covers: all 200 shared KernelBench records load (levels 1 and 2, 100 each, each source defining
Model, get_inputs and get_init_inputs); on a deterministic sample (problem ids 1, 11, ..., 91 of
each level, scaled to the CPU element budget by `problems.sizing.scale_problems`) the reference
itself, with `class Model` renamed to `ModelNew`, is accepted in hybrid mode, rejected in strict
mode by the static rule `no_custom_kernel`, and, with an unused @triton.jit kernel added,
rejected in strict mode by the runtime audit (`torch_compute`). Skips when
../shared/data/kernelbench is absent. Does not cover: scaling itself (tests/unit/test_kernelbench.py).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.problems.kernelbench import self_candidate
from tritonforge.types import Problem, Status, Verdict

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "kernelbench"
SAMPLE_IDS = tuple(range(1, 100, 10))  # 1, 11, ..., 91 in each level
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"no KernelBench data in {DATA}")


@pytest.fixture(scope="module")
def all_problems() -> list[Problem]:
    from tritonforge.problems.kernelbench import load_kernelbench

    return load_kernelbench(DATA)


def test_all_200_load(all_problems: list[Problem]) -> None:
    assert len(all_problems) == 200
    for level in (1, 2):
        ids = sorted(p.problem_id for p in all_problems if p.level == level)
        assert ids == list(range(1, 101)), f"level {level}"
    for p in all_problems:
        tree = ast.parse(p.reference_src)
        names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        assert {"Model", "get_inputs", "get_init_inputs"} <= names, p.id
        assert p.suite == "kernelbench" and p.size == "original"


@pytest.fixture(scope="module")
def sample(all_problems: list[Problem]) -> list[Problem]:
    from tritonforge.problems.sizing import scale_problems

    chosen = [p for p in all_problems if p.problem_id in SAMPLE_IDS]
    assert len(chosen) == 20
    scaled, report = scale_problems(chosen, workers=2, progress=False)
    failed = [f"{r.problem_id}: {r.reason}" for r in report if not r.ok]
    for level in (1, 2):
        assert sum(p.level == level for p in scaled) >= 8, failed
    return scaled


@pytest.fixture(scope="module")
def verdicts(sample: list[Problem]) -> Iterator[dict[tuple[str, str], Verdict]]:
    """(problem id, variant) -> verdict for variants hybrid | strict | strict_decoy."""
    variants = {
        "hybrid": (EvalSettings(device="cpu", mode="hybrid"), False),
        "strict": (EvalSettings(device="cpu", mode="strict"), False),
        "strict_decoy": (EvalSettings(device="cpu", mode="strict", correctness_trials=2), True),
    }
    with Evaluator(EvalSettings(device="cpu")) as ev, ThreadPoolExecutor(2) as pool:
        futures = {
            (p.id, name): pool.submit(ev.evaluate, p, self_candidate(p.reference_src, decoy), s)
            for p in sample
            for name, (s, decoy) in variants.items()
        }
        yield {key: f.result() for key, f in futures.items()}


@pytest.mark.slow
def test_reference_vs_reference(sample: list[Problem], verdicts) -> None:
    problems = []
    for p in sample:
        h = verdicts[(p.id, "hybrid")]
        s = verdicts[(p.id, "strict")]
        d = verdicts[(p.id, "strict_decoy")]
        problems.append((p.id, h.status.value, s.rule, d.rule))
        assert h.status is Status.CORRECT, f"{p.id} hybrid: {h.status.value} {h.rule}\n{h.message}"
        assert h.mode == "hybrid" and h.trials_passed == 5
        assert h.audit is not None and h.audit.torch_ops, "hybrid audit must report torch ops"
        assert h.reward == pytest.approx(0.3)
        assert s.status is Status.REWARD_HACK and s.rule == "no_custom_kernel", p.id
        assert s.phase == "static" and s.reward == 0.0
        assert d.status is Status.REWARD_HACK and d.rule == "torch_compute", (
            f"{p.id} strict+decoy: {d.status.value} {d.rule}\n{d.message}"
        )
    assert len(problems) >= 16
