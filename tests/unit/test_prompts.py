"""Prompt templates, messages and chat-template rendering with a tokenizer built in the test."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from tritonforge.config import load_config
from tritonforge.rollout.extract import Found, extract_code
from tritonforge.rollout.prompts import (
    HARDWARE_PRESETS,
    THINKING_OFF,
    THINKING_ON,
    PromptConfig,
    build_messages,
    fill_template,
    load_template,
    render,
    render_prompt,
)
from tritonforge.types import Problem

REF = (
    "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
    "    def forward(self, x):\n        return {'relu': torch.relu(x)}['relu']  # {{braces}} stay\n"
)
PROBLEM = Problem(id="builtin/relu", suite="builtin", name="relu", reference_src=REF)

CHATML = (
    "{%- for m in messages %}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    """A tiny byte-level BPE with ChatML special tokens, trained in memory (no downloads)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = [
        REF,
        load_template("system"),
        load_template("example_add"),
        "<think> </think> assistant user",
    ]
    tok.train_from_iterator(corpus * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHATML
    return fast


def test_messages_default() -> None:
    msgs = build_messages(PROBLEM)
    assert [m["role"] for m in msgs] == ["system", "user"]
    system, user = msgs[0]["content"], msgs[1]["content"]
    assert "class ModelNew" in system and "@triton.jit" in system and THINKING_ON in system
    assert "Allowed glue" in system
    assert REF.strip() in user  # the source verbatim, braces and all
    assert "{{braces}}" in user
    assert "def add_kernel" in user  # one-shot example included
    assert "Problem: relu." in user
    assert "Target hardware" not in user
    assert "{{" not in system


def test_options_change_messages() -> None:
    h200 = build_messages(
        PROBLEM, PromptConfig(hardware="h200", include_example=False, thinking=False)
    )
    assert "Target hardware: " + HARDWARE_PRESETS["h200"] in h200[1]["content"]
    assert "132 SMs" in h200[1]["content"]
    assert "def add_kernel" not in h200[1]["content"]
    assert THINKING_OFF in h200[0]["content"]
    cpu = build_messages(PROBLEM, PromptConfig(hardware="cpu-interpreter"))
    assert "correctness only" in cpu[1]["content"]
    free = build_messages(PROBLEM, PromptConfig(hardware="MI300X, 304 CUs"))
    assert "Target hardware: MI300X, 304 CUs" in free[1]["content"]
    merged = build_messages(PROBLEM, PromptConfig(use_system_message=False))
    assert (
        len(merged) == 1 and merged[0]["role"] == "user" and "Strict rules" in merged[0]["content"]
    )


def test_templates_from_files(tmp_path) -> None:
    (tmp_path / "sys.txt").write_text("SYS {{ thinking_instructions }}")
    (tmp_path / "usr.txt").write_text(
        "Solve {{problem_id}}:\n{{problem_source}}{{hardware_section}}"
    )
    cfg = load_config(
        PromptConfig,
        overrides=[
            f"system_template={tmp_path / 'sys.txt'}",
            f"user_template={tmp_path / 'usr.txt'}",
        ],
    )
    msgs = build_messages(PROBLEM, cfg)
    assert msgs[0]["content"] == f"SYS {THINKING_ON}"
    assert msgs[1]["content"] == f"Solve builtin/relu:\n{REF.strip()}"
    (tmp_path / "bad.txt").write_text("{{problem_sorce}}")
    with pytest.raises(KeyError, match="problem_sorce"):
        build_messages(PROBLEM, PromptConfig(user_template=str(tmp_path / "bad.txt")))
    with pytest.raises(FileNotFoundError, match="shipped"):
        load_template("nope")


def test_fill_template_is_single_pass() -> None:
    assert fill_template("a {{x}} b", {"x": "{{x}}"}) == "a {{x}} b"


def test_render_chatml(tokenizer) -> None:
    msgs = build_messages(PROBLEM)
    ids = render(tokenizer, msgs)
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\nYou are an expert GPU kernel engineer.")
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert REF.strip() in text
    no_gen = tokenizer.decode(render(tokenizer, msgs, add_generation_prompt=False))
    assert no_gen.endswith("<|im_end|>\n")
    no_think = render_prompt(tokenizer, PROBLEM, PromptConfig(thinking=False))
    assert tokenizer.decode(no_think).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert ids == render(tokenizer, msgs)  # deterministic


def test_render_needs_chat_template(tokenizer) -> None:
    bare = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer)
    with pytest.raises(ValueError, match="chat_template"):
        render(bare, [{"role": "user", "content": "hi"}])


def test_one_shot_example_is_a_correct_solution() -> None:
    """The shipped example's answer defines ModelNew and adds correctly on the Triton interpreter."""
    text = load_template("example_add")
    ex = extract_code(text.split("a correct answer is:")[1])
    assert ex.found is Found.FENCED_MODEL_NEW
    script = ex.code + (
        "\nimport torch\na, b = torch.randn(3000), torch.randn(3000)\n"
        "assert torch.equal(ModelNew()(a, b), a + b)\nprint('ok')\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="1")
    res = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "ok"
