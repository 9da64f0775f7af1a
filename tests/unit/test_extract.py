"""Code extraction from hand-written model responses."""

from __future__ import annotations

from tritonforge.rollout.extract import Found, ThinkState, extract_code, find_blocks, split_thinking

F = "```"
V1 = "import torch\n\nclass ModelNew(torch.nn.Module):\n    version = 1\n"
V2 = "import torch\n\nclass ModelNew(torch.nn.Module):\n    version = 2\n"


def fence(body: str, lang: str = "python", ticks: str = F) -> str:
    return f"{ticks}{lang}\n{body.rstrip()}\n{ticks}"


def test_single_python_block() -> None:
    ex = extract_code(f"Here you go:\n\n{fence(V1)}\n\nDone.")
    assert ex.code == V1
    assert ex.found is Found.FENCED_MODEL_NEW
    assert ex.think_state is ThinkState.NONE
    assert ex.lang == "python"


def test_last_model_new_block_wins() -> None:
    usage = "m = ModelNew()\nprint(m)"
    text = f"First try:\n{fence(V1)}\nBetter:\n{fence(V2)}\nUsage:\n{fence(usage)}\n"
    ex = extract_code(text)
    assert ex.code == V2  # last block that defines ModelNew, not the later usage block
    assert ex.n_blocks == 3


def test_py_and_bare_tags() -> None:
    assert extract_code(fence(V1, "py")).code == V1
    assert extract_code(fence(V1, "")).code == V1
    ex = extract_code(fence(V1, "python title=kernel.py"))
    assert (ex.code, ex.lang) == (V1, "python")
    assert extract_code(fence(V1, "", "~~~")).code == V1


def test_closed_think_is_removed() -> None:
    text = f"<think>\nDraft:\n{fence(V1)}\nhmm, fix it\n</think>\n\n{fence(V2)}"
    ex = extract_code(text)
    assert ex.code == V2
    assert ex.think_state is ThinkState.CLOSED
    assert "Draft:" in ex.thinking and "version = 1" in ex.thinking
    assert "<think>" not in ex.visible


def test_unterminated_think_gives_no_code() -> None:
    text = f"<think>\nLet me write it.\n{fence(V1)}\nNow check the mask"
    ex = extract_code(text)
    assert ex.code is None
    assert ex.found is Found.NONE
    assert ex.think_state is ThinkState.UNTERMINATED
    assert "version = 1" in ex.thinking
    # opt-in: code inside the unfinished reasoning as a last resort
    ex2 = extract_code(text, allow_code_in_think=True)
    assert (ex2.code, ex2.found) == (V1, Found.IN_THINKING)


def test_code_before_unterminated_think_is_visible() -> None:
    ex = extract_code(f"{fence(V1)}\n<think>second thoughts {fence(V2)}")
    assert ex.code == V1
    assert ex.think_state is ThinkState.UNTERMINATED


def test_close_only_think_opened_in_prompt() -> None:
    # Templates that put <think> in the prompt: the response starts inside the reasoning.
    text = f"I will fuse the ops.\n{fence(V1)}\n</think>\n\nFinal:\n{fence(V2)}"
    ex = extract_code(text)
    assert ex.code == V2
    assert ex.think_state is ThinkState.CLOSE_ONLY
    assert "fuse the ops" in ex.thinking
    assert extract_code("reasoning only\n</think>\n").code is None


def test_split_thinking_multiple_spans() -> None:
    visible, thinking, state = split_thinking("a<think>x</think>b<think>y</think>c")
    assert (visible, thinking, state) == ("abc", "x\ny", ThinkState.CLOSED)


def test_four_backtick_fence_holds_inner_fences() -> None:
    body = V1 + 'DOC = """\n```python\nexample\n```\n"""\n'
    ex = extract_code(fence(body, "python", "````"))
    assert ex.code == body
    assert ex.found is Found.FENCED_MODEL_NEW


def test_triple_fence_inside_string_extends_block() -> None:
    body = 'import torch\nHELP = """\n```\n"""\n\nclass ModelNew(torch.nn.Module):\n    pass\n'
    ex = extract_code(f"Answer:\n```python\n{body}```\nThat is all.")
    assert ex.code == body  # the ``` inside the string did not end the block
    assert ex.found is Found.FENCED_MODEL_NEW


def test_truncated_final_fence() -> None:
    cut = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x"
    ex = extract_code(f"Sure.\n```python\n{cut}")
    assert ex.found is Found.TRUNCATED_MODEL_NEW
    assert ex.code == cut + "\n"
    # a complete earlier ModelNew block beats a truncated later one
    ex2 = extract_code(f"{fence(V1)}\nImproved:\n```python\n{cut}")
    assert (ex2.code, ex2.found) == (V1, Found.FENCED_MODEL_NEW)
    # a truncated block without ModelNew is the last fallback
    ex3 = extract_code("```python\nimport torch\nx = 1")
    assert (ex3.code, ex3.found) == ("import torch\nx = 1\n", Found.TRUNCATED_FENCE)


def test_without_model_new_prefers_python_block() -> None:
    text = f"{fence('x = 1')}\nRun it with:\n{fence('python run.py', 'bash')}"
    ex = extract_code(text)
    assert (ex.code, ex.found) == ("x = 1\n", Found.FENCED_LAST)
    only_bash = extract_code(fence("echo hi", "bash"))
    assert (only_bash.code, only_bash.lang) == ("echo hi\n", "bash")


def test_unfenced_fallbacks() -> None:
    ex = extract_code(V1)
    assert (ex.code, ex.found) == (V1, Found.UNFENCED)
    ex2 = extract_code("Here is my solution, no fences:\n" + V2)
    assert (ex2.code, ex2.found) == (V2, Found.UNFENCED)
    # prose that does not parse as Python and has no fences: nothing
    ex3 = extract_code("I think class ModelNew should use a kernel, but I am not sure.")
    assert (ex3.code, ex3.found) == (None, Found.NONE)


def test_empty_and_inline_backticks() -> None:
    assert extract_code("").code is None
    assert extract_code("use ```x + y``` inline").code is None
    assert extract_code(fence("", "python")).code is None  # an empty block is not code
    assert find_blocks("```python\n```")[0].body == ""
