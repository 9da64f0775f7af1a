"""Code extraction from a model response: `<think>` handling, fenced blocks, fallbacks.

Covers: `extract_code(text) -> Extraction` (code or None, how it was found, the thinking text).
Does not cover: judging the code (see evaluation) or answers of non-code tasks (see rollout.tasks).

Decisions (each has a test in tests/unit/test_extract.py):
- Thinking. Every `<think>...</think>` span is removed from the visible text and kept as
  thinking. A `</think>` without an opening tag (templates that put `<think>` in the prompt, as
  Qwen3-Thinking does) makes everything before it thinking. An unterminated `<think>` makes
  everything after it thinking: the model never finished reasoning, so there is NO code (draft
  code inside unfinished reasoning is not an answer; `allow_code_in_think=True` lifts this, and
  also lets a response whose only code is inside closed thinking use it as a last resort).
- Fences follow CommonMark: an opening line of >= 3 backticks (or tildes) with an optional info
  string, closed by a line of the same character at least as long. A 4-backtick fence can hold
  3-backtick lines. A python block whose first closing fence leaves code that does not parse
  but a later bare fence makes it parse is extended to that fence (``` inside a string).
- Choice, first hit wins: (1) the LAST complete block defining `class ModelNew`; (2) a
  truncated final block (opened, never closed: the response hit max tokens) defining ModelNew;
  (3) the last complete block tagged python/py/python3 or untagged; (4) the last complete block
  of any language; (5) unfenced text that parses and defines ModelNew (the whole visible text,
  else from its first import/from/class/@ line); (6) a truncated final block without ModelNew.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from enum import Enum

__all__ = [
    "Extraction",
    "Found",
    "ThinkState",
    "defines_model_new",
    "extract_code",
    "split_thinking",
]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
PY_TAGS = {"", "python", "py", "python3", "py3"}
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^`\n]*$")
_MODEL_NEW = re.compile(r"^[ \t]*class[ \t]+ModelNew\b", re.MULTILINE)
_CODE_START = re.compile(r"^(import |from |class |@|def )", re.MULTILINE)


class Found(str, Enum):
    """How the code was found (or why not)."""

    FENCED_MODEL_NEW = "fenced_model_new"
    TRUNCATED_MODEL_NEW = "truncated_model_new"
    FENCED_LAST = "fenced_last"
    UNFENCED = "unfenced"
    TRUNCATED_FENCE = "truncated_fence"
    IN_THINKING = "in_thinking"
    ANSWER = "answer"  # a short answer of a non-code task (rollout.tasks)
    NONE = "none"


class ThinkState(str, Enum):
    NONE = "none"  # no think tags
    CLOSED = "closed"  # every <think> was closed
    CLOSE_ONLY = "close_only"  # a </think> without an opening tag (opening tag was in the prompt)
    UNTERMINATED = "unterminated"  # a <think> was never closed


@dataclass(frozen=True)
class Block:
    """One fenced block: its info-string language, body, and whether a closing fence was seen."""

    lang: str
    body: str
    closed: bool


@dataclass(frozen=True)
class Extraction:
    """Result of `extract_code`: code (None if no code), how it was found, thinking text."""

    code: str | None
    found: Found
    thinking: str = ""
    think_state: ThinkState = ThinkState.NONE
    visible: str = ""
    n_blocks: int = 0
    lang: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.code is not None


def defines_model_new(code: str) -> bool:
    """A line `class ModelNew...` (text check: also works on code that does not parse)."""
    return bool(_MODEL_NEW.search(code))


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def split_thinking(text: str) -> tuple[str, str, ThinkState]:
    """(visible text, thinking text, state) following the module's `<think>` rules."""
    thinking: list[str] = []
    state = ThinkState.NONE
    first_open = text.find(THINK_OPEN)
    first_close = text.find(THINK_CLOSE)
    if first_close != -1 and (first_open == -1 or first_close < first_open):
        thinking.append(text[:first_close])
        text = text[first_close + len(THINK_CLOSE) :]
        state = ThinkState.CLOSE_ONLY
    visible: list[str] = []
    pos = 0
    while True:
        start = text.find(THINK_OPEN, pos)
        if start == -1:
            visible.append(text[pos:])
            break
        visible.append(text[pos:start])
        end = text.find(THINK_CLOSE, start + len(THINK_OPEN))
        if end == -1:
            thinking.append(text[start + len(THINK_OPEN) :])
            state = ThinkState.UNTERMINATED
            break
        thinking.append(text[start + len(THINK_OPEN) : end])
        pos = end + len(THINK_CLOSE)
        if state is ThinkState.NONE:
            state = ThinkState.CLOSED
    # Stray closing tags after the first are dropped from the visible text.
    shown = "".join(visible).replace(THINK_CLOSE, "")
    return shown, "\n".join(t.strip("\n") for t in thinking), state


def _closing_fences(lines: list[str], start: int, char: str, length: int) -> list[int]:
    """Indices of lines from `start` that close a fence of `length` x `char`."""
    pat = re.compile(r"^ {0,3}" + re.escape(char) + "{" + str(length) + r",}[ \t]*$")
    return [i for i in range(start, len(lines)) if pat.match(lines[i])]


def find_blocks(text: str) -> list[Block]:
    """All fenced blocks in order; the last may be unclosed (truncated)."""
    lines = text.split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence = m.group(1)
        lang = re.split(r"[^a-z0-9_+-]", m.group(2).lower(), maxsplit=1)[0]
        closes = _closing_fences(lines, i + 1, fence[0], len(fence))
        if not closes:
            blocks.append(Block(lang, "\n".join(lines[i + 1 :]), closed=False))
            break
        end = closes[0]
        if lang in PY_TAGS and not _parses("\n".join(lines[i + 1 : end])):
            # A ``` line inside a string literal closed the block too early: extend to the first
            # later fence that makes the body parse, if any.
            for cand in closes[1:8]:
                if _parses("\n".join(lines[i + 1 : cand])):
                    end = cand
                    break
        blocks.append(Block(lang, "\n".join(lines[i + 1 : end]), closed=True))
        i = end + 1
    return blocks


def _unfenced(visible: str) -> str | None:
    """Visible text (or its tail from the first code-looking line) if it parses with ModelNew."""
    candidates = [visible.strip("\n")]
    m = _CODE_START.search(visible)
    if m:
        candidates.append(visible[m.start() :].strip("\n"))
    for cand in candidates:
        if cand and defines_model_new(cand) and _parses(cand):
            return cand
    return None


def _choose(blocks: list[Block]) -> tuple[Block | None, Found]:
    """Apply the choice order (1)-(4) and (6) of the module docstring to fenced blocks."""
    closed = [b for b in blocks if b.closed and b.body.strip()]
    truncated = [b for b in blocks if not b.closed and b.body.strip()]
    with_model = [b for b in closed if defines_model_new(b.body)]
    if with_model:
        return with_model[-1], Found.FENCED_MODEL_NEW
    if truncated and defines_model_new(truncated[-1].body):
        return truncated[-1], Found.TRUNCATED_MODEL_NEW
    py = [b for b in closed if b.lang in PY_TAGS]
    if py:
        return py[-1], Found.FENCED_LAST
    if closed:
        return closed[-1], Found.FENCED_LAST
    return None, Found.NONE


def _finish(code: str) -> str:
    return code.strip("\n") + "\n"


def extract_code(text: str, allow_code_in_think: bool = False) -> Extraction:
    """Find the candidate program in a model response (see the module docstring for the rules)."""
    visible, thinking, state = split_thinking(text or "")
    notes: list[str] = []
    if state is ThinkState.UNTERMINATED:
        notes.append("unterminated <think>: the text after it counts as thinking")
    blocks = find_blocks(visible)
    block, found = _choose(blocks)
    if block is not None:
        return Extraction(
            _finish(block.body), found, thinking, state, visible, len(blocks), block.lang, notes
        )
    unfenced = _unfenced(visible)
    if unfenced is not None:
        return Extraction(
            _finish(unfenced), Found.UNFENCED, thinking, state, visible, len(blocks), None, notes
        )
    truncated = [b for b in blocks if not b.closed and b.body.strip()]
    if truncated:
        body = truncated[-1].body
        return Extraction(
            _finish(body),
            Found.TRUNCATED_FENCE,
            thinking,
            state,
            visible,
            len(blocks),
            truncated[-1].lang,
            notes,
        )
    if allow_code_in_think and thinking:
        inner = extract_code(thinking, allow_code_in_think=False)
        if inner.code is not None:
            notes.append(f"code taken from thinking ({inner.found.value})")
            return Extraction(
                inner.code,
                Found.IN_THINKING,
                thinking,
                state,
                visible,
                len(blocks),
                inner.lang,
                notes,
            )
    return Extraction(None, Found.NONE, thinking, state, visible, len(blocks), None, notes)
