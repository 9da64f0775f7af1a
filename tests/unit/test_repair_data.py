"""Repair episodes: pure mutations of the built-in solutions, cached verdicts, trained-last masks.

The evaluator is not run here (tests/eval/test_variants_judged.py judges real mutations): the
verdict cache is filled by hand, which also checks that a cached verdict is never re-judged.
"""

from __future__ import annotations

import json

import pytest

from tritonforge.config.rollout import ProblemsConfig
from tritonforge.config.train import SFTDataConfig
from tritonforge.jobs import sft_data
from tritonforge.jobs.repair_data import MUTATIONS, Broken, _key, mutate
from tritonforge.jobs.sft_data import (
    build_sft_dataset,
    builtin_pairs,
    end_of_turn_id,
    pair_to_chat,
    problem_set_pairs,
    tokenize_chat,
)
from tritonforge.types import Status, Verdict

SIX = ["relu", "leaky_relu", "sigmoid", "silu", "tanh", "hardtanh"]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from transformers import AutoTokenizer

    from tritonforge.rollout.tiny_model import TinyModelSpec, make_tiny_model

    out = make_tiny_model(tmp_path_factory.mktemp("tiny") / "m", TinyModelSpec(vocab_size=1024))
    return AutoTokenizer.from_pretrained(out)


def test_every_mutation_breaks_every_elementwise_solution_differently() -> None:
    pairs = builtin_pairs("cpu", SIX)
    broken = mutate(pairs, list(MUTATIONS))
    assert len(broken) == len(SIX) * len(MUTATIONS)
    by = {(b.problem.name, b.mutation): b.code for b in broken}
    src = next(s for p, s in pairs if p.name == "relu")
    assert "mask = offsets < n_elements - 1\n" in by["relu", "mask_off_by_one"]
    assert "n_elements // BLOCK_SIZE" in by["relu", "grid_floor"]
    assert "tl.minimum(x, 0.0)" in by["relu", "wrong_op"]
    assert "tl.store(" not in by["relu", "missing_store"]
    assert "BLOCK_SIZE = 1000\n" in by["relu", "block_not_pow2"]
    assert by["relu", "other_kernel"] != src and "def " in by["relu", "other_kernel"]
    assert len(by["relu", "truncated"]) < len(src)
    assert "def relu_kernel(" in by["relu", "kernel_name_mismatch"]
    assert "leaky_relu_kernel[grid]" in by["relu", "kernel_name_mismatch"]
    with pytest.raises(SyntaxError):
        compile(by["relu", "syntax_error"], "x.py", "exec")
    for b in broken:
        assert b.code.strip() != b.solution.strip()


def test_mutate_filters_problems_skips_repeats_and_rejects_unknown_names() -> None:
    pairs = builtin_pairs("cpu", SIX)
    only = mutate(pairs, ["wrong_op", "wrong_op", "missing_store"], problems=["sigmoid"])
    assert [(b.problem.name, b.mutation) for b in only] == [
        ("sigmoid", "wrong_op"),
        ("sigmoid", "missing_store"),
    ]
    same = [(pairs[0][0], pairs[0][1]), (pairs[0][0].model_copy(update={"id": "x"}), pairs[0][1])]
    assert mutate(same, ["other_kernel"]) == []  # identical solutions: nothing else
    with pytest.raises(KeyError):
        mutate(pairs, ["no_such_mutation"])


def test_problem_sets_add_variant_pairs_once() -> None:
    sets = [ProblemsConfig(suite="variants", category="sft")] * 2
    pairs = problem_set_pairs(sets)
    assert len(pairs) == 12 and all(p.category == "sft" for p, _ in pairs)


def test_repair_chats_from_cached_verdicts_train_only_the_fix(tok, tmp_path, monkeypatch) -> None:
    cfg = SFTDataConfig.model_validate(
        {
            "builtin_problems": ["relu", "sigmoid"],
            "thinking": "none",
            "prompt": {"include_example": False},
            "repair": {
                "mutations": ["wrong_op", "mask_off_by_one"],
                "per_problem": 1,
                "cache_dir": str(tmp_path),
            },
        }
    )
    pairs = builtin_pairs("cpu", ["relu", "sigmoid"])
    rows = []
    for b in mutate(pairs, cfg.repair.mutations):
        # relu's wrong_op "passes" here: it must be skipped in favour of the next mutation
        ok = b.problem.name == "relu" and b.mutation == "wrong_op"
        v = Verdict(status=Status.CORRECT if ok else Status.NUMERICAL_MISMATCH, message=b.mutation)
        rows.append({"key": _key(b, cfg.repair.eval), "verdict": v.model_dump(mode="json")})
    (tmp_path / "repair_verdicts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def no_judge(*a, **k):  # every verdict is cached: the evaluator must not start
        raise AssertionError("judged although cached")

    monkeypatch.setattr("tritonforge.evaluation.judge.evaluator.Evaluator", no_judge)
    chats = sft_data.repair_chats(pairs, cfg)
    assert [c.messages[2]["content"] for c in chats] == [
        pair_to_chat(
            b.problem, "", cfg, [(b.code, Verdict(status=Status.NUMERICAL_MISMATCH))]
        ).messages[2]["content"]
        for b in mutate(pairs, cfg.repair.mutations)
        if (b.problem.name, b.mutation) in {("relu", "mask_off_by_one"), ("sigmoid", "wrong_op")}
    ]
    assert all(
        c.train_last_only and "numerical_mismatch" in c.messages[3]["content"] for c in chats
    )

    ds = build_sft_dataset(cfg, tok)
    assert len(ds) == 2 + 2  # two direct pairs, two repair episodes
    eot = end_of_turn_id(tok)
    ep = tokenize_chat(tok, chats[0].messages, eot, cfg.prompt.thinking, train_last_only=True)
    trained = tok.decode([t for t, m in zip(ep.token_ids, ep.loss_mask) if m])
    assert trained.strip().endswith("```<|im_end|>") and trained.count("```python") == 1
    fix = chats[0].messages[-1]["content"]
    assert trained.replace("<|im_end|>", "") == fix  # only the final answer is a target
    full = tokenize_chat(tok, chats[0].messages, eot, cfg.prompt.thinking)
    assert full.token_ids == ep.token_ids and sum(full.loss_mask) > sum(ep.loss_mask)


def test_broken_records_carry_their_source() -> None:
    b = mutate(builtin_pairs("cpu", ["tanh"]), ["truncated"])[0]
    assert isinstance(b, Broken) and b.verdict is None and b.problem.name == "tanh"


def test_judge_all_takes_its_backend_as_an_argument_also_inside_an_event_loop(tmp_path) -> None:
    """repair_data opens the backend it is given (here the in-process evaluator of
    sft_data.local_judge), only for programs not cached, and runs inside a running event loop
    (the RL job builds its anchors' SFT data in one)."""
    import asyncio

    from tritonforge.config.eval import EvalSettings
    from tritonforge.jobs.repair_data import judge_all

    settings = EvalSettings(device="cpu")
    broken = mutate(builtin_pairs("cpu", ["relu"]), ["syntax_error"])
    opened: list[str] = []

    def judge():  # the real in-process evaluator, counted
        opened.append("evaluator")
        return sft_data.local_judge(settings, 1)()

    async def in_loop():
        return judge_all(broken, settings, str(tmp_path), judge)

    (b,) = asyncio.run(in_loop())
    assert b.verdict is not None and b.verdict.status is Status.SYNTAX_ERROR
    (again,) = judge_all(broken, settings, str(tmp_path), judge)  # cached: not opened again
    assert again.verdict == b.verdict and opened == ["evaluator"]
