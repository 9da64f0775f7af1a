"""SFT data and loop: exact assistant masks, loaders, conversion, filters, loss going down."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tritonforge.config.train import SFTDataConfig, SFTRunConfig
from tritonforge.jobs.sft import run_sft
from tritonforge.jobs.sft_data import (
    TemplateError,
    answer_text,
    build_sft_dataset,
    builtin_pairs,
    continuation_ids,
    end_of_turn_id,
    load_kernelbook,
    pair_to_chat,
    tokenize_chat,
)
from tritonforge.rollout.prompts import build_messages, render
from tritonforge.training.sft import SFTTrainer
from tritonforge.types import Status, Verdict

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from tritonforge.rollout.tiny_model import TinyModelSpec, make_tiny_model

    out = tmp_path_factory.mktemp("tiny") / "model"
    return make_tiny_model(out, TinyModelSpec(vocab_size=1024, hidden=64, layers=2))


@pytest.fixture(scope="module")
def tok(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


TWO_TURNS = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U1"},
    {"role": "assistant", "content": "A1"},
    {"role": "user", "content": "F1"},
    {"role": "assistant", "content": "A2 x"},
]


def enc(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def test_masks_cover_exactly_the_assistant_tokens(tok):
    eot = end_of_turn_id(tok)
    assert tok.convert_ids_to_tokens(eot) == "<|im_end|>"
    ex = tokenize_chat(tok, TWO_TURNS, eot)
    prefix = enc(
        tok,
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\n",
    )
    a1 = [*enc(tok, "A1"), eot]
    feedback = enc(tok, "\n<|im_start|>user\nF1<|im_end|>\n<|im_start|>assistant\n")
    a2 = [*enc(tok, "A2 x"), eot]
    assert ex.token_ids == prefix + a1 + feedback + a2
    assert ex.loss_mask == [0] * len(prefix) + [1] * len(a1) + [0] * len(feedback) + [1] * len(a2)
    spans = [tok.decode([t for t, m in zip(ex.token_ids, ex.loss_mask) if m])]
    assert spans == ["A1<|im_end|>A2 x<|im_end|>"]
    # the stream is the template's rendering of the chat, up to the final end-of-turn token
    full = render(tok, TWO_TURNS, add_generation_prompt=False)
    assert (
        ex.token_ids == full[: len(ex.token_ids)] and tok.decode(full[len(ex.token_ids) :]) == "\n"
    )


def test_continuation_survives_a_template_that_rewrites_history(tok):
    # like Qwen3: earlier assistant turns lose their <think> block once a new user turn follows
    template = (
        "{%- for m in messages %}{{- '<|im_start|>' + m['role'] + '\\n' }}"
        "{%- if m['role'] == 'assistant' and not loop.last %}"
        "{{- m['content'].split('</think>')[-1].lstrip() }}"
        "{%- else %}{{- m['content'] }}{%- endif %}{{- '<|im_end|>\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    saved = tok.chat_template
    tok.chat_template = template
    try:
        eot = end_of_turn_id(tok)
        history = [
            {"role": "user", "content": "U"},
            {"role": "assistant", "content": "<think>\nhm\n</think>\n\nA"},
        ]
        delta = continuation_ids(tok, history, [{"role": "user", "content": "F"}], eot)
        assert tok.decode(delta) == "\n<|im_start|>user\nF<|im_end|>\n<|im_start|>assistant\n"
    finally:
        tok.chat_template = saved
    with pytest.raises(TemplateError):
        tokenize_chat(tok, [{"role": "user", "content": "no answer"}], eot)


def test_pairs_become_rollout_prompts_with_fenced_answers():
    problem, solution = builtin_pairs("cpu")[0]
    cfg = SFTDataConfig()
    chat = pair_to_chat(problem, solution, cfg)
    assert chat.messages[:-1] == build_messages(problem, cfg.prompt)  # same prompt as rollouts
    answer = chat.messages[-1]["content"]
    assert answer.startswith("<think>\n\n</think>\n\n```python\n") and answer.endswith("\n```")
    assert solution.strip("\n") in answer
    short = SFTDataConfig(thinking="short", think_text="Fuse it.")
    assert answer_text("x = 1\n", short) == "<think>\nFuse it.\n</think>\n\n```python\nx = 1\n```"
    assert answer_text("x = 1", SFTDataConfig(thinking="none")) == "```python\nx = 1\n```"
    no_think_prompt = SFTDataConfig.model_validate({"prompt": {"thinking": False}})
    assert answer_text("x = 1", no_think_prompt) == "```python\nx = 1\n```"
    # an earlier failed attempt becomes a turn with the rollout feedback text
    verdict = Verdict(status=Status.COMPILE_ERROR, message="bad constexpr", problem_id=problem.id)
    multi = pair_to_chat(problem, solution, cfg, attempts=[("broken()", verdict)])
    assert [m["role"] for m in multi.messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert multi.messages[3]["content"].startswith("Evaluation result: compile_error")


def test_kernelbook_loader_parquet_and_jsonl_with_renaming(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"python_code": "class Foo(nn.Module):\n    pass\nFoo()", "triton_code": "class FooNew(nn.Module):\n    pass",
         "entry_point": "Foo"},
        {"python_code": "class Bar: pass", "triton_code": "def kernel(): pass", "entry_point": "Bar"},
        {"python_code": None, "triton_code": "x", "entry_point": "Baz"},
    ]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "kb.parquet")
    (tmp_path / "kb.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    for name in ("kb.parquet", "kb.jsonl"):
        pairs, dropped = load_kernelbook(
            SFTDataConfig(kind="kernelbook", path=str(tmp_path / name))
        )
        assert len(pairs) == 1 and dict(dropped) == {"no_model_new": 1, "missing_column": 1}
        problem, triton = pairs[0]
        assert problem.reference_src == "class Model(nn.Module):\n    pass\nModel()"
        assert triton == "class ModelNew(nn.Module):\n    pass" and problem.name == "Foo"
    cols = SFTDataConfig(kind="kernelbook", path=str(tmp_path / "kb.jsonl"), pytorch_column="src",
                         triton_column="tri", entry_point_column=None)  # fmt: skip
    (tmp_path / "kb.jsonl").write_text(
        json.dumps({"src": "a", "tri": "class ModelNew: pass"}) + "\n"
    )
    assert len(load_kernelbook(cols)[0]) == 1


def test_chat_jsonl_dedup_and_length_filter(tmp_path, tok):
    good = {"messages": TWO_TURNS}
    long = {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "word " * 300},
        ]
    }
    lines = [good, good, long, {"messages": "oops"}]
    path = tmp_path / "chats.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    ds = build_sft_dataset(SFTDataConfig(kind="chat", path=str(path), max_tokens=200), tok)
    assert len(ds) == 1
    assert dict(ds.dropped) == {"duplicate": 1, "too_long": 1, "bad_record": 1}
    assert sum(ds.examples[0].loss_mask) == len(enc(tok, "A1")) + len(enc(tok, "A2 x")) + 2


def test_sft_on_builtin_pairs_lowers_the_loss(tiny_dir, tok, tmp_path):
    cfg = SFTRunConfig.model_validate({
        "run_dir": str(tmp_path),
        "model": {"path": str(tiny_dir)},
        "optim": {"lr": 3e-3},
        "batch": {"micro_batch_tokens": 4096, "chunk_tokens": 512},
        "sft": {"batch_size": 4, "epochs": 3, "data": {"max_tokens": 1700, "prompt": {"include_example": False}}},
        "logging": {"progress": False},
    })  # fmt: skip
    data = build_sft_dataset(cfg.sft.data, tok)
    assert 4 <= len(data) <= 12  # the shortest built-in solutions
    trainer = SFTTrainer(cfg, tokenizer=tok)
    before = trainer.eval_loss(data.examples)
    assert math.isfinite(before)
    trainer.fit(data.examples, max_steps=5)
    after = trainer.eval_loss(data.examples)
    assert after < before - 1.0


def test_run_sft_writes_run_dir(tiny_dir, tmp_path):
    cfg = SFTRunConfig.model_validate({
        "run_dir": str(tmp_path / "run"),
        "model": {"path": str(tiny_dir)},
        "batch": {"micro_batch_tokens": 4096},
        "sft": {"batch_size": 2, "max_steps": 2,
                "data": {"max_tokens": 1650, "prompt": {"include_example": False}}},
        "checkpoint": {"every_steps": 1, "keep_last": 1},
        "logging": {"progress": False},
    })  # fmt: skip
    result = run_sft(cfg)
    run = tmp_path / "run"
    assert result.steps == 2 and math.isfinite(result.final_loss)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and "loss" in rows[0]
    assert (run / "config.json").is_file() and (run / "final" / "tokenizer.json").is_file()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_00000002"]
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(run / "final")
    assert torch.isfinite(next(loaded.parameters())).all()


def test_rl_trainer_from_a_model_dir_loads_reference_only_for_kl(tiny_dir, tmp_path):
    from tritonforge.config.train import TrainerConfig
    from tritonforge.training.batching import TrainSequence
    from tritonforge.training.rl import RLTrainer

    def cfg(kl: float) -> TrainerConfig:
        return TrainerConfig.model_validate(
            {"model": {"path": str(tiny_dir)}, "loss": {"kl_coef": kl}}
        )

    assert RLTrainer(cfg(0.0)).ref is None
    trainer = RLTrainer(cfg(0.05), run_dir=tmp_path)
    assert trainer.ref is not None and trainer.core.tokenizer is not None
    seq = TrainSequence(list(range(3, 23)), [0] * 5 + [1] * 15, [0.0] * 5 + [1.0] * 15)
    m = trainer.train_step([seq, seq])
    assert m.loss_metrics["kl"] == pytest.approx(0.0, abs=1e-7)
    path = trainer.save_weights()
    assert (path / "tokenizer.json").is_file() and (path / "model.safetensors").is_file()


def test_cli_sft_command(tiny_dir, tmp_path):
    from tritonforge.cli import main

    toml = tmp_path / "sft.toml"
    toml.write_text(
        f'run_dir = "{tmp_path / "run"}"\n[model]\npath = "{tiny_dir}"\n'
        "[sft]\nbatch_size = 2\nmax_steps = 1\n[sft.data]\nmax_tokens = 1650\n"
        "[sft.data.prompt]\ninclude_example = false\n[logging]\nprogress = false\n"
    )
    assert main(["sft", "--config", str(toml), "--set", "optim.lr=1e-3"]) == 0
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["optim"]["lr"] == 1e-3 and saved["sft"]["max_steps"] == 1
    assert (tmp_path / "run" / "final" / "config.json").is_file()


def test_sft_feedback_tokens_equal_the_rollout_agents(tok):
    """SFT multi-turn streams must look like RL ones: the feedback delta equals the agent's."""
    agent = pytest.importorskip("tritonforge.rollout.agent")
    from tritonforge.rollout.feedback import build_feedback

    eot = end_of_turn_id(tok)
    feedback = build_feedback(Verdict(status=Status.RUNTIME_ERROR, message="boom {x}\n  at line 3"))
    answer = "```python\nx = 1\n```"
    history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": answer}]
    ours = continuation_ids(tok, history, [{"role": "user", "content": feedback}], eot)
    response = [*enc(tok, answer), eot]
    assert ours == agent.ChatFrame(tok).feedback_ids(response, feedback)
