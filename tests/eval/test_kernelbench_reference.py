"""KernelBench references judged against themselves: the evaluator is consistent on real problems.

Covers: all 200 shared KernelBench records load (levels 1 and 2, 100 each, each source defining
Model, get_inputs and get_init_inputs); every problem that scales to the CPU element budget
(199: L1/50 keeps its sizes in literals) is, with `class Model` renamed to `ModelNew`, accepted
in hybrid mode (L2/66, dropout in training mode, is detected as nondeterministic and judged by
statistics), rejected in strict mode by the static rule `no_custom_kernel`, and, with an unused
@triton.jit kernel added, rejected in strict mode by the runtime audit (`torch_compute`).
Cost on the 2-core CI machine, measured: scaling all 200 ~60 s (cached on disk afterwards),
hybrid with 3 trials ~0.25 s per problem, the strict decoy (stops at its first trial) ~0.2 s,
with two evaluations at a time: about 3 minutes in all. One Evaluator, one slow-marked test.
Skips when ../shared/data/kernelbench is absent. Does not cover: scaling itself
(tests/unit/test_kernelbench.py), GPU sizes (benchmarks/kernelbench_self.py).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.checks import run_static
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.problems.kernelbench import self_candidate
from tritonforge.types import Problem, Status, Verdict

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "kernelbench"
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
def scaled(all_problems: list[Problem]) -> list[Problem]:
    from tritonforge.problems.scaling import default_cache_dir, scale_problems

    out, report = scale_problems(
        all_problems, workers=2, progress=False, cache_dir=default_cache_dir()
    )
    unscalable = {r.problem_id for r in report if not r.ok}
    assert unscalable == {"kernelbench/L1/50_conv_standard_2D__square_input__square_kernel"}, [
        f"{r.problem_id}: {r.reason}" for r in report if not r.ok
    ]
    return out


@pytest.fixture(scope="module")
def verdicts(scaled: list[Problem]) -> Iterator[dict[tuple[str, str], Verdict]]:
    """(problem id, variant) -> verdict for variants hybrid | strict_decoy."""
    variants = {
        "hybrid": (EvalSettings(device="cpu", mode="hybrid", correctness_trials=3), False),
        "strict_decoy": (EvalSettings(device="cpu", mode="strict", correctness_trials=2), True),
    }
    with Evaluator(EvalSettings(device="cpu")) as ev, ThreadPoolExecutor(2) as pool:
        futures = {
            (p.id, name): pool.submit(ev.evaluate, p, self_candidate(p.reference_src, decoy), s)
            for p in scaled
            for name, (s, decoy) in variants.items()
        }
        yield {key: f.result() for key, f in futures.items()}


@pytest.mark.slow
def test_every_scalable_reference_vs_itself(scaled: list[Problem], verdicts) -> None:
    assert len(scaled) == 199
    wrong, random_refs = [], []
    for p in scaled:
        h, d = verdicts[(p.id, "hybrid")], verdicts[(p.id, "strict_decoy")]
        if h.status is not Status.CORRECT:
            wrong.append(f"{p.id} hybrid: {h.status.value} {h.rule} {h.message[:300]}")
        elif h.mode != "hybrid" or h.trials_passed != 3 or h.speedup is not None:
            wrong.append(f"{p.id} hybrid: mode {h.mode} trials {h.trials_passed} {h.speedup}")
        elif not (h.audit and h.audit.torch_ops):
            wrong.append(f"{p.id} hybrid: the audit reports no torch ops")
        if h.reference_nondeterministic:
            random_refs.append(p.id)
        if d.status is not Status.REWARD_HACK or d.rule != "torch_compute":
            wrong.append(f"{p.id} strict+decoy: {d.status.value} {d.rule} {d.message[:300]}")
        s = run_static(self_candidate(p.reference_src), "strict")
        if (s.status, s.rule) != (Status.REWARD_HACK, "no_custom_kernel"):
            wrong.append(f"{p.id} strict: {s.status} {s.rule}")
    assert not wrong, "\n".join(wrong)
    assert random_refs == ["kernelbench/L2/66_Matmul_Dropout_Softmax"]
    note = " ".join(verdicts[(random_refs[0], "hybrid")].notes)
    assert "nondeterministic" in note and "statistics" in note
