"""Repair episodes for SFT: real mutations of correct solutions, judged by the real evaluator.

Covers: `MUTATIONS` (a registry of small source-to-source breakages of a Triton solution: an
off-by-one mask, a floor-divided grid that drops the tail, a wrong operation, a missing store, a
syntax error, a block size that is not a power of two, another problem's kernel, a launch of
another problem's kernel name, a program cut off), `mutate` (the broken programs of one
solution, in the configured order), `judge_all` (every broken program judged by an evaluation
backend the caller opens, e.g. an in-process evaluator on the CPU, only for what is not cached;
verdicts cached on disk in a JSONL file keyed by problem, source and settings) and
`repair_attempts` (per problem the first `per_problem` programs the judge did not accept, with
their verdicts).
Does not cover: which evaluator judges (the caller's `open_backend`; jobs.sft_data.local_judge),
the chats and their tokenisation (jobs.sft_data.repair_chats: [prompt, broken program, the
judge's feedback, the correct solution], trained on the last answer only) or the feedback text
(rollout.feedback: the same function writes the feedback of RL turns, so SFT and RL turns look
alike).

Determinism: mutations are pure text edits; the evaluator draws its inputs from the fixed
`repair.eval.secret_seed`, so the same code gives the same verdicts (and the cache only saves time).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

from tritonforge.config.eval import EvalSettings
from tritonforge.config.registry import Registry
from tritonforge.config.train import RepairDataConfig
from tritonforge.evaluation.api import EvalBackend
from tritonforge.logging_setup import get_logger
from tritonforge.types import Problem, Status, Verdict

__all__ = ["MUTATIONS", "Broken", "OpenBackend", "judge_all", "mutate", "repair_attempts"]

OpenBackend = Callable[[], EvalBackend]  # opens a backend; the caller of it closes it (aclose)
T = TypeVar("T")

log = get_logger(__name__)


@dataclass(frozen=True)
class Broken:
    """One mutated program of a problem's solution (verdict filled by `judge_all`)."""

    problem: Problem
    solution: str
    mutation: str
    code: str
    verdict: Verdict | None = None


# A mutation maps (solution source, other solutions of the set) to a broken source, or None
# when it does not apply to this solution.
Mutation = Callable[[str, Sequence[str]], str | None]
MUTATIONS: Registry[Mutation] = Registry("mutation")
_register = MUTATIONS.register


def _sub_once(pattern: str, repl: str, src: str) -> str | None:
    out, n = re.subn(pattern, repl, src, count=1)
    return out if n else None


@_register("mask_off_by_one")
def _mask_off_by_one(src: str, others: Sequence[str]) -> str | None:
    """`mask = offsets < n` -> `offsets < n - 1`: the last element is never written."""
    return _sub_once(r"(mask = \w+ < \w+)\n", r"\1 - 1\n", src)


@_register("grid_floor")
def _grid_floor(src: str, others: Sequence[str]) -> str | None:
    """`triton.cdiv(n, BLOCK)` -> `n // BLOCK`: the tail block is never launched."""
    return _sub_once(r"triton\.cdiv\((\w+), (\w+)\)", r"\1 // \2", src)


_WRONG_OPS = (
    ("tl.maximum(", "tl.minimum("),
    ("tl.minimum(", "tl.maximum("),
    ("tl.exp(-", "tl.exp("),
    ("x > 0", "x < 0"),
    ("x < 0", "x > 0"),
    ("1.0 + ", "1.0 - "),
)


@_register("wrong_op")
def _wrong_op(src: str, others: Sequence[str]) -> str | None:
    """The first of a few operation swaps that applies (max <-> min, e^-x -> e^x, ...)."""
    for old, new in _WRONG_OPS:
        if old in src:
            return src.replace(old, new, 1)
    return None


@_register("missing_store")
def _missing_store(src: str, others: Sequence[str]) -> str | None:
    """Every `tl.store(...)` line removed: the output is allocated but never written."""
    lines = src.splitlines(keepends=True)
    kept = [x for x in lines if "tl.store(" not in x]
    return "".join(kept) if len(kept) < len(lines) else None


@_register("syntax_error")
def _syntax_error(src: str, others: Sequence[str]) -> str | None:
    """The closing parenthesis of the first `tl.store(...)` line dropped."""
    return _sub_once(r"(tl\.store\([^\n]*)\)\n", r"\1\n", src)


@_register("block_not_pow2")
def _block_not_pow2(src: str, others: Sequence[str]) -> str | None:
    """`BLOCK_SIZE = 1024` -> `1000`: `tl.arange` needs a power of two."""
    return _sub_once(r"(BLOCK_SIZE\w* = )(\d+)\n", r"\g<1>1000\n", src)


@_register("other_kernel")
def _other_kernel(src: str, others: Sequence[str]) -> str | None:
    """Another problem's solution (the first that differs): a kernel for the wrong function."""
    return next((o for o in others if o.strip() != src.strip()), None)


_KERNEL_DEF = re.compile(r"@triton\.jit\s*\ndef (\w+)\(")


@_register("kernel_name_mismatch")
def _kernel_name_mismatch(src: str, others: Sequence[str]) -> str | None:
    """The launch calls another problem's kernel name (a program mixed from two solutions)."""
    mine = _KERNEL_DEF.search(src)
    if mine is None:
        return None
    for other in others:
        theirs = _KERNEL_DEF.search(other)
        if theirs is not None and theirs.group(1) != mine.group(1):
            return _sub_once(rf"\b{mine.group(1)}\[", f"{theirs.group(1)}[", src)
    return None


@_register("truncated")
def _truncated(src: str, others: Sequence[str]) -> str | None:
    """The program cut off after 60% of its lines, as a generation that ran out of tokens."""
    lines = src.splitlines(keepends=True)
    return "".join(lines[: max(1, len(lines) * 3 // 5)]) if len(lines) > 4 else None


def mutate(
    pairs: Sequence[tuple[Problem, str]], names: Sequence[str], problems: Sequence[str] = ()
) -> list[Broken]:
    """Broken programs of every pair (only pairs whose id or name is in `problems`, if given),
    mutations in `names` order; a mutation that does not apply, or repeats an earlier program
    of the same problem, is skipped. `other_kernel` looks at the following pairs cyclically."""
    for name in names:
        MUTATIONS.lookup(name)  # UnknownName (a KeyError) with a "did you mean"
    out: list[Broken] = []
    for i, (problem, solution) in enumerate(pairs):
        if problems and problem.id not in problems and problem.name not in problems:
            continue
        others = [s for _, s in [*pairs[i + 1 :], *pairs[:i]]]
        seen = {solution.strip()}
        for name in names:
            code = MUTATIONS[name](solution, others)
            if code is None or code.strip() in seen:
                continue
            seen.add(code.strip())
            out.append(Broken(problem, solution, name, code))
    return out


def _key(b: Broken, settings: EvalSettings) -> str:
    blob = json.dumps(
        [b.problem.id, b.problem.reference_src, b.code, settings.cache_key(), settings.secret_seed],
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _load_cache(path: Path | None) -> dict[str, Verdict]:
    if path is None or not path.is_file():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            out[row["key"]] = Verdict.model_validate(row["verdict"])
    return out


def judge_all(
    broken: Sequence[Broken],
    settings: EvalSettings,
    cache_dir: str | None,
    open_backend: OpenBackend,
) -> list[Broken]:
    """`broken` with verdicts: from the cache when present, else judged by the backend that
    `open_backend` opens (only when something is not cached; closed after) and appended to
    the cache."""
    path = Path(cache_dir) / "repair_verdicts.jsonl" if cache_dir else None
    cache = _load_cache(path)
    keys = [_key(b, settings) for b in broken]
    todo = sorted({k: b for k, b in zip(keys, broken) if k not in cache}.items())
    if todo:
        new = _in_own_loop(_judge(open_backend, todo, settings))
        cache.update(new)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as fh:
                for k, v in new.items():
                    fh.write(json.dumps({"key": k, "verdict": v.model_dump(mode="json")}) + "\n")
    return [
        Broken(b.problem, b.solution, b.mutation, b.code, cache[k]) for b, k in zip(broken, keys)
    ]


async def _judge(
    open_backend: OpenBackend, todo: list[tuple[str, Broken]], settings: EvalSettings
) -> dict[str, Verdict]:
    backend = open_backend()
    bar = tqdm(total=len(todo), desc="judging repair attempts", unit="program", leave=False)

    async def one(b: Broken) -> Verdict:
        verdict = await backend.evaluate(b.problem, b.code, settings)
        bar.update(1)
        return verdict

    try:
        verdicts = await asyncio.gather(*(one(b) for _, b in todo))
    finally:
        bar.close()
        await backend.aclose()
    return {k: v for (k, _), v in zip(todo, verdicts)}


def _in_own_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on a fresh event loop in a helper thread: callers may be inside one already
    (the RL job builds its step-guard anchors, SFT data, in its event loop)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def repair_attempts(
    pairs: Sequence[tuple[Problem, str]], rc: RepairDataConfig, open_backend: OpenBackend
) -> list[Broken]:
    """Per problem the first `rc.per_problem` mutated programs the judge did not accept, with
    their verdicts (see the module docstring); logs the verdict counts."""
    judged = judge_all(
        mutate(pairs, rc.mutations, rc.problems), rc.eval, rc.cache_dir, open_backend
    )
    kept: dict[str, int] = {}
    out = []
    for b in judged:
        assert b.verdict is not None
        if b.verdict.status is Status.CORRECT or kept.get(b.problem.id, 0) >= rc.per_problem:
            continue
        kept[b.problem.id] = kept.get(b.problem.id, 0) + 1
        out.append(b)
    statuses: dict[str, int] = {}
    for b in judged:
        statuses[b.verdict.status.value] = statuses.get(b.verdict.status.value, 0) + 1
    log.info("repair episodes", extra={"fields": {"episodes": len(out), **statuses}})
    return out
