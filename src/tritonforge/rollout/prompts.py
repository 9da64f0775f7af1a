"""Prompts for the kernel agent: system and user templates, chat messages, chat-template rendering.

Covers: `PromptConfig` (from config.task), loading templates (a name shipped in `rollout/prompts/<name>.txt` or a
file path), filling `{{placeholders}}` (single pass, so a problem source containing braces is
inserted verbatim), `build_messages(problem, cfg)` and `render(tokenizer, messages)` through the
tokenizer's chat template. Does not cover: feedback messages between turns (see
rollout.feedback), the multi-turn token bookkeeping (the agent loop), or other task types'
prompts (see rollout.tasks).

Placeholders: system template `{{thinking_instructions}}`; user template `{{example_section}}`,
`{{problem_source}}`, `{{problem_name}}`, `{{problem_id}}`, `{{hardware_section}}`. A template
may use any subset; an unknown placeholder is an error (a typo must not reach the model).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from tritonforge.config.task import PromptConfig
from tritonforge.types import Problem

__all__ = [
    "HARDWARE_PRESETS",
    "PromptConfig",
    "build_messages",
    "fill_template",
    "hardware_text",
    "load_template",
    "render",
    "render_prompt",
]

HARDWARE_PRESETS: dict[str, str] = {
    "h200": (
        "NVIDIA H200 (Hopper, sm_90): 132 SMs, 141 GB HBM3e at about 4.8 TB/s, 228 KB shared "
        "memory per SM, 50 MB L2, about 990 TFLOP/s dense bf16 tensor-core peak. Memory-bound "
        "kernels are judged against bandwidth; fuse to avoid extra round trips to HBM."
    ),
    "h100": (
        "NVIDIA H100 SXM (Hopper, sm_90): 132 SMs, 80 GB HBM3 at about 3.35 TB/s, 228 KB shared "
        "memory per SM, 50 MB L2."
    ),
    "cpu-interpreter": (
        "CPU Triton interpreter (TRITON_INTERPRET=1): correctness only; timings are not "
        "measured. Keep kernels simple and correct; small block sizes run faster here."
    ),
}

THINKING_ON = (
    "Think first: reason step by step inside <think> ... </think>, then give the final answer "
    "after the closing tag. Only code after </think> is evaluated."
)
THINKING_OFF = "Answer directly with the code block; keep any explanation short."

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def load_template(name_or_path: str) -> str:
    """Text of a template: an existing file path, else `rollout/prompts/<name>.txt` in the package."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path.read_text()
    name = name_or_path[:-4] if name_or_path.endswith(".txt") else name_or_path
    if "/" in name or "\\" in name:
        raise FileNotFoundError(f"prompt template file {name_or_path!r} does not exist")
    res = resources.files("tritonforge.rollout").joinpath("prompts").joinpath(f"{name}.txt")
    if not res.is_file():
        shipped = sorted(
            p.name[:-4]
            for p in resources.files("tritonforge.rollout").joinpath("prompts").iterdir()
            if p.name.endswith(".txt")
        )
        raise FileNotFoundError(f"unknown prompt template {name_or_path!r}; shipped: {shipped}")
    return res.read_text()


def fill_template(template: str, values: Mapping[str, str]) -> str:
    """Replace every `{{name}}` with `values[name]` in one pass; unknown names raise KeyError."""
    missing = sorted({m.group(1) for m in _PLACEHOLDER.finditer(template)} - set(values))
    if missing:
        raise KeyError(f"template uses unknown placeholders {missing}; known: {sorted(values)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def hardware_text(hardware: str | None) -> str | None:
    """Preset text for a known preset name (case-insensitive), else the text itself."""
    if hardware is None or not hardware.strip():
        return None
    return HARDWARE_PRESETS.get(hardware.strip().lower(), hardware.strip())


def _user_values(problem: Problem, cfg: PromptConfig) -> dict[str, str]:
    example = load_template(cfg.example_template) if cfg.include_example else ""
    hw = hardware_text(cfg.hardware)
    return {
        "example_section": example,
        "problem_source": problem.reference_src.strip("\n"),
        "problem_name": problem.name,
        "problem_id": problem.id,
        "hardware_section": f"\nTarget hardware: {hw}\n" if hw else "",
    }


def build_messages(problem: Problem, cfg: PromptConfig | None = None) -> list[dict[str, str]]:
    """The opening chat messages of a kernel episode: [system, user] (or [user] if merged)."""
    cfg = cfg or PromptConfig()
    system = fill_template(
        load_template(cfg.system_template),
        {"thinking_instructions": THINKING_ON if cfg.thinking else THINKING_OFF},
    ).strip()
    user = fill_template(load_template(cfg.user_template), _user_values(problem, cfg)).strip()
    if not cfg.use_system_message:
        return [{"role": "user", "content": f"{system}\n\n{user}"}]
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _as_id_list(out: Any) -> list[int]:
    """Normalise apply_chat_template output (list, BatchEncoding/dict, nested batch) to ids."""
    if isinstance(out, Mapping) or hasattr(out, "input_ids"):
        out = out["input_ids"]
    if hasattr(out, "tolist"):
        out = out.tolist()
    out = list(out)
    if out and isinstance(out[0], (list, tuple)):
        if len(out) != 1:
            raise ValueError(f"expected one conversation, got a batch of {len(out)}")
        out = list(out[0])
    return [int(x) for x in out]


def render(
    tokenizer: Any,
    messages: Sequence[Mapping[str, str]],
    add_generation_prompt: bool = True,
    enable_thinking: bool | None = None,
    **template_kwargs: Any,
) -> list[int]:
    """Token ids of `messages` under the tokenizer's chat template (no extra special tokens).

    `enable_thinking` is passed to the template only when not None (Qwen3-style templates read
    it; others ignore unknown variables). Works with transformers 4.x (list) and 5.x
    (BatchEncoding) return types.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("tokenizer has no chat_template; set one before rendering prompts")
    kwargs = dict(template_kwargs)
    if enable_thinking is not None:
        kwargs["enable_thinking"] = enable_thinking
    out = tokenizer.apply_chat_template(
        [dict(m) for m in messages],
        tokenize=True,
        add_generation_prompt=add_generation_prompt,
        return_dict=False,
        **kwargs,
    )
    return _as_id_list(out)


def render_prompt(tokenizer: Any, problem: Problem, cfg: PromptConfig | None = None) -> list[int]:
    """Shortcut: `render(tokenizer, build_messages(problem, cfg), enable_thinking=cfg.thinking)`."""
    cfg = cfg or PromptConfig()
    return render(tokenizer, build_messages(problem, cfg), enable_thinking=cfg.thinking)


class TemplateError(ValueError):
    """The chat template cannot be extended turn by turn as token-exact continuations."""


def end_of_turn_id(tokenizer: Any, token: str | None = None) -> int:
    """Id of the token ending an assistant turn (`token`, else the tokenizer's eos)."""
    tid = tokenizer.convert_tokens_to_ids(token) if token else tokenizer.eos_token_id
    if not isinstance(tid, int) or tid < 0 or tid == getattr(tokenizer, "unk_token_id", None):
        raise ValueError(
            f"end-of-turn token {token or tokenizer.eos_token!r} is not in the vocabulary"
        )
    return tid


def continuation_ids(
    tokenizer: Any,
    history: Sequence[Mapping[str, str]],
    new_messages: Sequence[Mapping[str, str]],
    eot_id: int,
    enable_thinking: bool | None = None,
) -> list[int]:
    """Tokens the chat template puts after the last end-of-turn token of `history` (which ends
    with an assistant message) when `new_messages` follow, through the next generation prompt.

    Found by counting end-of-turn tokens, so templates that re-render earlier turns (e.g.
    dropping old reasoning) still give the right delta. Raises TemplateError when the counts
    or the text after the last end-of-turn token disagree.
    """
    prev = render(tokenizer, history, add_generation_prompt=False, enable_thinking=enable_thinking)
    full = render(
        tokenizer,
        [*history, *new_messages],
        add_generation_prompt=True,
        enable_thinking=enable_thinking,
    )
    n = prev.count(eot_id)
    ends = [i for i, t in enumerate(full) if t == eot_id]
    if n == 0 or len(ends) < n:
        raise TemplateError(f"{n} end-of-turn tokens before the new messages, {len(ends)} after")
    start = ends[n - 1] + 1
    last_prev = len(prev) - 1 - prev[::-1].index(eot_id)
    tail = prev[last_prev + 1 :]  # e.g. the newline after <|im_end|>
    if full[start : start + len(tail)] != tail:
        raise TemplateError("the chat template renders the previous turn's ending differently")
    return full[start:]
