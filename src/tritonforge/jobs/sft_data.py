"""SFT data: loaders, conversion to chats in the rollout format, tokenisation with exact masks.

Covers: KernelBook-style pairs (parquet or JSONL, configurable column names; the entry-point class
renamed to Model / ModelNew), chat JSONL ({"messages": [...]}), the built-in suite's
(problem, solution) pairs plus those of further problem sets (`extra_problems`, e.g. the
`variants` suite); `pair_to_chat` (the SAME opening messages as rollouts via
rollout.prompts.build_messages, the answer as a fenced python block with an optional empty or
short think block, optional earlier attempts answered by rollout.feedback.build_feedback: a
repair episode, trained on its last answer only); `tokenize_chat` (the token stream a rollout
would produce, with the loss mask exactly on the trained assistant tokens); length filter and
dedup (`build_sft_dataset`); repair episodes (`repair_chats`, when `repair.mutations` is set:
the attempts jobs.repair_data keeps, judged by an in-process evaluator, `local_judge`, as chats).
Does not cover: the trainer (training.sft), mutations and their judging (jobs.repair_data),
or how a candidate is judged (evaluation).

Token stream, as in a multi-turn rollout (token in, token out): the prompt is
`render(messages[:first assistant], add_generation_prompt=True)`; each assistant answer is
`encode(content) + [end_of_turn]` (mask 1: what the model would generate, ending with the token
that stops generation); the messages between two answers (feedback) are `continuation_ids`: the
tokens the chat template puts after the previous answer's end-of-turn token, up to and including
the next generation prompt (mask 0). A rollout loop that appends feedback the same way
(`continuation_ids`) trains on exactly the same kind of stream.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonforge.config.eval import EvalSettings
from tritonforge.config.rollout import EvalBackendConfig, ProblemsConfig
from tritonforge.config.train import SFTDataConfig
from tritonforge.evaluation.api import EvalBackend
from tritonforge.jobs.repair_data import OpenBackend, repair_attempts
from tritonforge.logging_setup import get_logger
from tritonforge.rollout.feedback import build_feedback
from tritonforge.rollout.prompts import (
    TemplateError,
    build_messages,
    continuation_ids,
    end_of_turn_id,
    render,
)
from tritonforge.types import Problem, Verdict

__all__ = [
    "ChatExample",
    "SFTDataset",
    "TemplateError",
    "TokenizedExample",
    "answer_text",
    "build_sft_dataset",
    "builtin_pairs",
    "continuation_ids",
    "end_of_turn_id",
    "load_chat_jsonl",
    "load_kernelbook",
    "load_records",
    "local_judge",
    "pair_to_chat",
    "problem_set_pairs",
    "repair_chats",
    "tokenize_chat",
]

log = get_logger(__name__)
Message = dict[str, str]


@dataclass(frozen=True)
class ChatExample:
    """A chat; `train_last_only`: only the last assistant message is trained on (a repair
    episode's earlier, wrong attempts are context, never targets)."""

    messages: list[Message]
    source: str = ""
    train_last_only: bool = False


@dataclass(frozen=True)
class TokenizedExample:
    token_ids: list[int]
    loss_mask: list[int]
    source: str = ""


@dataclass
class SFTDataset:
    examples: list[TokenizedExample]
    dropped: Counter = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self.examples)


# ------------------------------------------------------------------------------------ loading
def load_records(path: str | Path, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Rows of a parquet file (by suffix) or a JSONL file, as dicts."""
    p = Path(path)
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        schema_names = set(pq.read_schema(p).names)
        cols = [c for c in columns if c in schema_names] if columns else None
        return pq.read_table(p, columns=cols).to_pylist()
    rows = []
    with p.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rows.append(json.loads(line))
    return rows


def _rename(src: str, old: str, new: str) -> str:
    return re.sub(rf"\b{re.escape(old)}\b", new, src) if old and old != new else src


def load_kernelbook(cfg: SFTDataConfig) -> tuple[list[tuple[Problem, str]], Counter]:
    """(problem, triton source) pairs from cfg.path; rows missing a column or a `ModelNew`
    class (after renaming `<entry>New` -> ModelNew, `<entry>` -> Model) are counted as dropped."""
    if cfg.path is None:
        raise ValueError("sft.data.path is required for kind='kernelbook'")
    cols = [cfg.pytorch_column, cfg.triton_column]
    if cfg.entry_point_column:
        cols.append(cfg.entry_point_column)
    pairs, dropped = [], Counter()
    for i, row in enumerate(load_records(cfg.path, cols)):
        torch_src, triton_src = row.get(cfg.pytorch_column), row.get(cfg.triton_column)
        if not isinstance(torch_src, str) or not isinstance(triton_src, str):
            dropped["missing_column"] += 1
            continue
        entry = row.get(cfg.entry_point_column) if cfg.entry_point_column else None
        if isinstance(entry, str) and entry:
            triton_src = _rename(_rename(triton_src, f"{entry}New", "ModelNew"), entry, "Model")
            torch_src = _rename(torch_src, entry, "Model")
        if not re.search(r"class\s+ModelNew\b", triton_src):
            dropped["no_model_new"] += 1
            continue
        name = entry if isinstance(entry, str) and entry else f"example_{i}"
        problem = Problem(
            id=f"kernelbook/{i}", suite="kernelbook", name=name, reference_src=torch_src
        )
        pairs.append((problem, triton_src))
    return pairs, dropped


def load_chat_jsonl(cfg: SFTDataConfig) -> tuple[list[ChatExample], Counter]:
    """Chats from cfg.path (JSONL or parquet) whose `messages_column` is a list of
    {role, content} dicts with at least one assistant message."""
    if cfg.path is None:
        raise ValueError("sft.data.path is required for kind='chat'")
    out, dropped = [], Counter()
    for i, row in enumerate(load_records(cfg.path, [cfg.messages_column])):
        msgs = row.get(cfg.messages_column)
        ok = isinstance(msgs, list) and all(
            isinstance(m, Mapping) and isinstance(m.get("content"), str) and "role" in m
            for m in msgs
        )
        if not ok:
            dropped["bad_record"] += 1
            continue
        out.append(
            ChatExample(
                [{"role": m["role"], "content": m["content"]} for m in msgs], f"{cfg.path}:{i}"
            )
        )
    return out, dropped


def builtin_pairs(size: str = "cpu", names: Sequence[str] = ()) -> list[tuple[Problem, str]]:
    """The built-in suite's (problem, solution) pairs (optionally only `names`, by name or id):
    the CPU demo's SFT seed data."""
    from tritonforge.problems import load_suite, select

    probs = load_suite("builtin", size=size)
    if names:
        probs = select(probs, ids=list(names))
        if not probs:
            raise ValueError(f"no built-in problem matches {list(names)}")
    return [(p, p.solution_src) for p in probs if p.solution_src]


# ------------------------------------------------------------------------------------ chats
def answer_text(code: str, cfg: SFTDataConfig) -> str:
    """The assistant answer: optional think block, then the code in one fenced python block.

    No think block is added when the prompt disables thinking (the chat template pre-fills an
    empty one in the generation prompt then, as Qwen3's does)."""
    block = f"```python\n{code.strip(chr(10))}\n```"
    if not cfg.prompt.thinking or cfg.thinking == "none":
        return block
    reasoning = "\n\n" if cfg.thinking == "empty" else f"\n{cfg.think_text.strip()}\n"
    return f"<think>{reasoning}</think>\n\n{block}"


def pair_to_chat(
    problem: Problem,
    solution_src: str,
    cfg: SFTDataConfig,
    attempts: Sequence[tuple[str, Verdict]] = (),
) -> ChatExample:
    """Rollout-format chat for one pair; `attempts` (code, verdict) become earlier turns, each
    followed by its feedback message, before the final correct answer."""
    messages = list(build_messages(problem, cfg.prompt))
    for code, verdict in attempts:
        messages.append({"role": "assistant", "content": answer_text(code, cfg)})
        messages.append({"role": "user", "content": build_feedback(verdict, cfg.feedback)})
    messages.append({"role": "assistant", "content": answer_text(solution_src, cfg)})
    return ChatExample(messages, problem.id, train_last_only=bool(attempts))


# ------------------------------------------------------------------------------------ tokens
def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def tokenize_chat(
    tokenizer: Any, messages: Sequence[Mapping[str, str]], eot_id: int,
    enable_thinking: bool | None = None, source: str = "", train_last_only: bool = False,
) -> TokenizedExample:  # fmt: skip
    """The rollout-shaped token stream of a chat and its assistant-only loss mask (see the
    module docstring). Messages after the last assistant message are ignored. With
    `train_last_only` the earlier assistant messages get mask 0 (context, not targets)."""
    roles = [m["role"] for m in messages]
    if "assistant" not in roles:
        raise TemplateError("no assistant message")
    j = roles.index("assistant")
    ids = render(
        tokenizer, messages[:j], add_generation_prompt=True, enable_thinking=enable_thinking
    )
    mask = [0] * len(ids)
    while True:
        answer = [*_encode(tokenizer, messages[j]["content"]), eot_id]
        nxt = next((k for k in range(j + 1, len(roles)) if roles[k] == "assistant"), None)
        ids += answer
        mask += [0 if train_last_only and nxt is not None else 1] * len(answer)
        if nxt is None:
            return TokenizedExample(ids, mask, source)
        delta = continuation_ids(
            tokenizer, messages[: j + 1], messages[j + 1 : nxt], eot_id, enable_thinking
        )
        ids += delta
        mask += [0] * len(delta)
        j = nxt


def _content_hash(messages: Iterable[Mapping[str, str]]) -> str:
    blob = json.dumps([[m["role"], m["content"]] for m in messages], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def problem_set_pairs(sets: Sequence[ProblemsConfig]) -> list[tuple[Problem, str]]:
    """(problem, solution) pairs of every problem with a known solution in `sets` (any suite:
    e.g. the `variants` suite's "sft" split), in order, each problem once."""
    from tritonforge.problems import load_suite, select

    out, seen = [], set()
    for ps in sets:
        kwargs = {"size": ps.size} if ps.size else {}
        probs = select(
            load_suite(ps.suite, **kwargs), ps.level, ps.name, ps.category, ps.ids or None
        )
        for p in probs[: ps.limit] if ps.limit else probs:
            if p.solution_src and p.id not in seen:
                seen.add(p.id)
                out.append((p, p.solution_src))
    return out


def _chats(cfg: SFTDataConfig) -> tuple[list[ChatExample], Counter]:
    if cfg.kind == "chat":
        return load_chat_jsonl(cfg)
    if cfg.kind == "kernelbook":
        pairs, dropped = load_kernelbook(cfg)
    else:
        pairs, dropped = builtin_pairs(cfg.builtin_size, cfg.builtin_problems), Counter()
    pairs = pairs + problem_set_pairs(cfg.extra_problems)
    chats = [pair_to_chat(p, sol, cfg) for p, sol in pairs]
    if cfg.repair.mutations:
        chats += repair_chats(pairs, cfg)
    return chats, dropped


def local_judge(settings: EvalSettings, workers: int) -> OpenBackend:
    """Opens an in-process evaluator with `settings`, `workers` evaluations at a time."""

    def open_backend() -> EvalBackend:
        from tritonforge.rollout.runner import build_eval_backend

        return build_eval_backend(EvalBackendConfig(settings=settings, concurrency=workers))

    return open_backend


def repair_chats(
    pairs: Sequence[tuple[Problem, str]],
    cfg: SFTDataConfig,
    open_backend: OpenBackend | None = None,
) -> list[ChatExample]:
    """Repair episodes of `pairs`: per kept attempt (jobs.repair_data.repair_attempts) the chat
    [prompt, broken program, the judge's feedback, the correct solution], trained on the last
    answer only; judged by `open_backend`'s backend, else an in-process evaluator."""
    rc = cfg.repair
    judge = open_backend or local_judge(rc.eval, rc.workers)
    return [
        pair_to_chat(b.problem, b.solution, cfg, attempts=[(b.code, b.verdict)])
        for b in repair_attempts(pairs, rc, judge)
    ]


def build_sft_dataset(cfg: SFTDataConfig, tokenizer: Any) -> SFTDataset:
    """Load, convert, dedup (by content hash), tokenise and length-filter; counts every drop."""
    chats, dropped = _chats(cfg)
    eot = end_of_turn_id(tokenizer, cfg.end_of_turn_token)
    seen: set[str] = set()
    out: list[TokenizedExample] = []
    for chat in chats:
        if cfg.dedup:
            h = _content_hash(chat.messages)
            if h in seen:
                dropped["duplicate"] += 1
                continue
            seen.add(h)
        try:
            ex = tokenize_chat(
                tokenizer, chat.messages, eot, cfg.prompt.thinking, chat.source,
                chat.train_last_only,
            )  # fmt: skip
        except TemplateError:
            dropped["template"] += 1
            continue
        if len(ex.token_ids) < cfg.min_tokens:
            dropped["too_short"] += 1
        elif len(ex.token_ids) > cfg.max_tokens:
            dropped["too_long"] += 1
        else:
            out.append(ex)
        if cfg.limit is not None and len(out) >= cfg.limit:
            break
    log.info("sft data ready", extra={"fields": {"examples": len(out), **dict(dropped)}})
    return SFTDataset(out, dropped)
