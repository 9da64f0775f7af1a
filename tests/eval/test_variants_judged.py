"""Judged by the real evaluator: every `variants` problem accepts its base solution, and the
repair mutations of the demo are rejected with the statuses their feedback describes.

Covers: the suite's references are well-formed and equivalent to the base function (the base
solution passes every correctness trial), each demo mutation of relu and leaky_relu gets a
non-correct verdict (numerical mismatch, compile/runtime/init/syntax errors, reward hack), and
the verdict cache file answers a second call without judging. Does not cover: timing.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.jobs.repair_data import MUTATIONS, judge_all, mutate
from tritonforge.jobs.sft_data import builtin_pairs, local_judge
from tritonforge.problems import load_suite
from tritonforge.types import Status

SETTINGS = EvalSettings(device="cpu", secret_seed=0)


def test_every_variant_accepts_its_base_solution() -> None:
    probs = load_suite("variants", size="cpu")
    with Evaluator(SETTINGS) as ev, ThreadPoolExecutor(2) as pool:
        verdicts = list(pool.map(lambda p: ev.evaluate(p, p.solution_src), probs))
    bad = {
        p.id: (v.status.value, v.message[:200])
        for p, v in zip(probs, verdicts)
        if v.status is not Status.CORRECT
    }
    assert not bad


def test_mutations_are_rejected_and_cached(tmp_path, monkeypatch) -> None:
    pairs = builtin_pairs("cpu", ["relu", "leaky_relu"])
    broken = mutate(pairs, list(MUTATIONS))
    judged = judge_all(broken, SETTINGS, str(tmp_path), local_judge(SETTINGS, 2))
    got = {(b.problem.name, b.mutation): b.verdict.status for b in judged}
    assert Status.CORRECT not in got.values()
    assert got["relu", "mask_off_by_one"] is Status.NUMERICAL_MISMATCH
    assert got["relu", "syntax_error"] is Status.SYNTAX_ERROR
    assert got["relu", "block_not_pow2"] is Status.COMPILE_ERROR
    assert got["relu", "missing_store"] is Status.REWARD_HACK
    assert got["relu", "kernel_name_mismatch"] is Status.RUNTIME_ERROR
    assert got["leaky_relu", "other_kernel"] is Status.INIT_ERROR  # relu's ModelNew takes no slope
    lines = (tmp_path / "repair_verdicts.jsonl").read_text().splitlines()
    assert len(lines) == len(broken)

    def no_judge(*a, **k):
        raise AssertionError("judged although cached")

    monkeypatch.setattr("tritonforge.evaluation.judge.evaluator.Evaluator", no_judge)
    again = judge_all(broken, SETTINGS, str(tmp_path), local_judge(SETTINGS, 2))
    assert [b.verdict.status for b in again] == [b.verdict.status for b in judged]
