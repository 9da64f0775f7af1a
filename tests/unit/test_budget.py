"""Budgets a busy machine cannot spend (evaluation/judge/budget.py), by hand and for real.

Covers: LoadAwareBudget's arithmetic on hand-made usage (no wait: the plain budget; waiting
moves the deadline by the wait; own time spent: timeout; the wall-clock cap: Starved, with the
figures in its message; no /proc data: the plain budget); `tree_usage` of a real busy process
tree (its CPU seconds grow, its wait is read); and, slow, a real worker starved by higher-priority
hogs pinned to its CPU: with load-aware budgets the correct kernel is accepted, with a tight cap
the evaluation is retried once and reported as `judge_fault` (not the candidate's timeout), and
with plain wall-clock budgets (load_stretch 1) it is the `timeout` a loaded machine used to give.
Does not cover: GPU workers (the same accounting, untested there).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.budget import LoadAwareBudget, Starved, Usage, tree_usage
from tritonforge.types import Problem, Status


class Fake:
    def __init__(self) -> None:
        self.t, self.cpu, self.wait = 100.0, 0.0, 0.0

    def clock(self) -> float:
        return self.t

    def usage(self, pid: int) -> Usage:
        return Usage(self.cpu, self.wait)


def test_deadline_moves_by_the_wait_for_a_cpu() -> None:
    f = Fake()
    b = LoadAwareBudget(1, budget=10.0, stretch=4.0, usage=f.usage, clock=f.clock)
    assert b.deadline == 110.0
    f.t, f.cpu = 110.0, 10.0  # busy all along, never waited: own time spent
    assert b.next_deadline() is None
    b = LoadAwareBudget(1, budget=10.0, stretch=4.0, usage=f.usage, clock=f.clock)
    f.t, f.cpu, f.wait = 120.0, 13.0, 6.0  # (started at 110) 10 s wall, 6 s waiting: 6 s left
    assert b.next_deadline() == pytest.approx(126.0) and b.waited == 6.0
    f.t, f.wait = 126.0, 12.0  # 16 s wall, 12 waited: 4 own
    assert b.next_deadline() == pytest.approx(132.0)
    f.t, f.wait = 150.0, 36.0  # the cap (start 110 + 4 x 10 s of wall time), 4 s own time
    with pytest.raises(Starved) as exc:
        b.next_deadline()
    assert "waited 36 s for a CPU" in str(exc.value) and "10 s budget" in str(exc.value)


def test_no_proc_data_means_the_plain_budget() -> None:
    f = Fake()
    b = LoadAwareBudget(1, 5.0, 4.0, usage=lambda pid: None, clock=f.clock)
    f.t = 105.0
    assert b.next_deadline() is None
    b = LoadAwareBudget(1, 5.0, 1.0, usage=f.usage, clock=f.clock)  # stretch 1: wall clock
    f.t, f.wait = 110.0, 5.0
    assert b.next_deadline() is None


def test_tree_usage_of_a_real_process_tree() -> None:
    code = "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'while True: pass'])\nwhile True: pass\n"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        time.sleep(1.0)
        first = tree_usage(proc.pid)
        time.sleep(1.0)
        second = tree_usage(proc.pid)
        assert first is not None and second is not None
        assert second.cpu_s > first.cpu_s and second.wait_s >= first.wait_s >= 0.0
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
    assert tree_usage(proc.pid) is None  # gone


RELU_REF = """import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.randn(256)]
def get_init_inputs():
    return []
"""
BUSY_RELU = """import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=offs < n)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        total = 0
        for i in range(4_500_000):  # about 0.3 s of CPU on an idle core
            total += i
        out = torch.empty_like(x)
        relu_kernel[(1,)](x, out, x.numel(), BLOCK=256)
        return out
"""


@pytest.mark.slow
def test_a_starved_worker_is_not_failed_for_the_machines_load() -> None:
    from tritonforge.evaluation.judge.evaluator import Evaluator

    problem = Problem(id="t/busy_relu", suite="t", name="busy_relu", reference_src=RELU_REF)
    base = EvalSettings(device="cpu", mode="hybrid", correctness_trials=1, sandbox="namespaces")
    hog = "import os\nos.sched_setaffinity(0, {0})\nos.nice(-10)\nwhile True: pass\n"
    with Evaluator(base) as ev:
        ev.server("cpu")
        os.sched_setaffinity(ev.server("cpu").proc.pid, {0})  # workers inherit CPU 0
        # each hog in its own session: with scheduler autogroups, CPU is shared between
        # sessions, so 8 sessions of hogs leave the worker's session about a ninth of CPU 0
        hogs = [
            subprocess.Popen([sys.executable, "-c", hog], start_new_session=True) for _ in range(8)
        ]
        try:
            time.sleep(0.5)
            verdicts = {}
            for name, stretch in (("aware", 40.0), ("cap", 1.25), ("wall", 1.0)):
                s = base.model_copy(deep=True)
                s.budgets.compile_s, s.budgets.load_stretch = 2.0, stretch
                verdicts[name] = ev.evaluate(problem, BUSY_RELU + f"\n# {name}\n", s)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    aware, cap, wall = verdicts["aware"], verdicts["cap"], verdicts["wall"]
    assert aware.status is Status.CORRECT, (aware.status, aware.message)
    assert aware.phase_seconds["compile"] > 2.0  # it ran past its wall-clock budget
    assert cap.status is Status.JUDGE_FAULT and "too busy" in cap.message, cap.message
    assert any("judged twice" in n for n in cap.notes) and not cap.status.is_fault
    assert wall.status is Status.TIMEOUT and wall.phase == "compile", wall.message
