"""Nondeterministic references (reference.determinism, compare.compare_stats), in process.

Covers: the determinism check (a deterministic reference passes; dropout in training mode and
torch.rand in forward are caught, with the size of the difference); judging by statistics:
honest samples of the same random process pass (200 of 200 here), a candidate without the
randomness (dropout in eval mode), a constant output, extra NaNs, wrong shape or dtype fail
with a message that names the statistic; the store marks the problem and gives every case the
statistics of STAT_RUNS runs; compare_to_reference picks the comparison by the case.
Does not cover: the sandboxed path (tests/eval/test_kernelbench_reference.py, L2/66).
"""

from __future__ import annotations

import torch

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.compare import compare_stats, compare_to_reference, output_stats
from tritonforge.evaluation.judge.problem_check import STAT_RUNS
from tritonforge.evaluation.judge.reference import ReferenceStore
from tritonforge.types import Problem, Status

DROPOUT_SRC = """import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 256)
        self.drop = nn.Dropout(0.2)
    def forward(self, x):
        return torch.softmax(self.drop(self.lin(x)), dim=1)
def get_inputs():
    return [torch.rand(32, 64)]
def get_init_inputs():
    return []
"""
NOISE_SRC = DROPOUT_SRC.replace(
    "return torch.softmax(self.drop(self.lin(x)), dim=1)", "return x + torch.rand_like(x)"
)
PLAIN_SRC = DROPOUT_SRC.replace("self.drop(self.lin(x))", "self.lin(x)")
TOL = {"float32": 1e-4}.get


def _problem(name: str, src: str) -> Problem:
    return Problem(id=f"t/{name}", suite="t", name=name, reference_src=src)


def test_store_marks_nondeterministic_problems_once() -> None:
    store = ReferenceStore(64 << 20)
    plain = store.reference(_problem("plain", PLAIN_SRC), "cpu")
    case = store.case(plain, 1, "native")
    assert plain.checked and plain.nondeterministic is None and case.stat_runs is None
    for name, src in (("dropout", DROPOUT_SRC), ("noise", NOISE_SRC)):
        ref = store.reference(_problem(name, src), "cpu")
        first = store.case(ref, 1, "native")
        assert ref.nondeterministic and "differ" in ref.nondeterministic, name
        assert "max |diff|" in ref.nondeterministic
        assert first.stat_runs is not None and len(first.stat_runs) == STAT_RUNS
        assert len(store.case(ref, 2, "scaled").stat_runs) == STAT_RUNS


def test_honest_samples_pass_and_imitations_fail() -> None:
    torch.manual_seed(0)
    lin, drop = torch.nn.Linear(64, 256), torch.nn.Dropout(0.2)
    x = torch.rand(32, 64)
    with torch.no_grad():
        sample = lambda: torch.softmax(drop(lin(x)), 1)  # noqa: E731
        runs = [output_stats(sample()) for _ in range(STAT_RUNS)]
        expected = sample()
        honest = [compare_stats(expected, runs, sample(), TOL)[0] for _ in range(200)]
        assert honest.count(Status.CORRECT) == 200
        no_dropout = compare_stats(expected, runs, torch.softmax(lin(x), 1), TOL)
        assert no_dropout[0] is Status.NUMERICAL_MISMATCH and "std" in no_dropout[2]
        constant = compare_stats(expected, runs, torch.full_like(expected, 1 / 256), TOL)
        assert constant[0] is Status.NUMERICAL_MISMATCH
        nan = sample()
        nan[0, 0] = float("nan")
        assert compare_stats(expected, runs, nan, TOL)[2].endswith("1 non-finite values")
        assert compare_stats(expected, runs, sample()[:4], TOL)[0] is Status.SHAPE_MISMATCH
        assert compare_stats(expected, runs, sample().double(), TOL)[0] is Status.DTYPE_MISMATCH


def test_compare_to_reference_picks_the_comparison() -> None:
    store = ReferenceStore(64 << 20)
    s = EvalSettings()
    ref = store.reference(_problem("dropout", DROPOUT_SRC), "cpu")
    case = store.case(ref, 3, "native")
    again = ref.run(case.inputs)  # another random sample: not equal element by element
    assert compare_to_reference(case, again, s, ref.problem)[0] is Status.CORRECT
    plain = store.reference(_problem("plain", PLAIN_SRC), "cpu")
    pcase = store.case(plain, 3, "native")
    wrong = pcase.expected * 1.01
    assert compare_to_reference(pcase, wrong, s, plain.problem)[0] is Status.NUMERICAL_MISMATCH
