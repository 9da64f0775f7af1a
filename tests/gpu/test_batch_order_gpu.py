"""Batch order on a real GPU (run with `pytest -m gpu tests/gpu`): shares are estimated against
the device's real budget, and a large problem (1/3 of the budget a side) interleaved with light
ones is judged through eval-dir's path with backfills counted. Does not cover: the order and the
admission rule themselves (CPU: tests/unit/test_batch_order.py, tests/unit/test_admission.py,
tests/integration/test_admission_replay.py)."""

from __future__ import annotations

import pytest
import torch

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.batch_order import is_heavy, run_jobs, shares_for
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.evaluation.judge.resources import capacity
from tritonforge.problems.kernelbench import self_candidate
from tritonforge.types import Problem, Status

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

REF = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2.0

def get_inputs():
    return [torch.randn(N)]

def get_init_inputs():
    return []
"""


def _problem(name: str, n: int) -> Problem:
    src = REF.replace("N)", f"{n})")
    return Problem(id=f"test/{name}", name=name, reference_src=src, suite="test", level=1)


def test_large_problems_backfilled_on_the_gpu() -> None:
    s = EvalSettings(device="cuda", mode="hybrid", measure_performance=False)
    cap = capacity(s, "cuda:0")
    big_n = int(cap / 28 / 4)  # evaluation_bytes ~ 14 x (in + out): about half the budget
    problems = [_problem(f"big{i}", big_n) for i in range(3)]
    problems += [_problem(f"small{i}", 1 << 20) for i in range(6)]
    shares = shares_for([p.reference_src for p in problems], s, "cuda:0")
    assert all(is_heavy(x, 4) for x in shares[:3]) and not any(is_heavy(x, 4) for x in shares[3:])
    verdicts = {}
    with Evaluator(s) as ev:
        run_jobs(
            lambda p: ev.evaluate(p, self_candidate(p.reference_src)),
            problems,
            shares,
            4,
            lambda i, p, v: verdicts.__setitem__(p.id, v),
        )
        stats = ev.device_stats()["cuda:0"]
    assert all(v.status is Status.CORRECT for v in verdicts.values()), {
        k: v.short() for k, v in verdicts.items()
    }
    assert stats["peak_reserved"] <= stats["capacity"] and "backfills" in stats
