"""Scaling KernelBook-format problems down to a factor or an element budget, in child processes.

Covers: `scale_source` (one source), `scale_problems` (many, on a pool of child processes, with a
progress bar and an on-disk cache of replies, `default_cache_dir`) and `ScaleResult`. The search
and a CPU forward of the result run in problems.scale_worker's child; which constants are sizes
and how a source is rewritten come from problems.sizing. Does not cover: executing sources in
this process.

Default CPU budget (`DEFAULT_ELEMENT_BUDGET` = 2**18 elements, `DEFAULT_FLOPS_PER_ELEMENT` = 2**10):
see problems.sizing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from queue import Queue
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tritonforge.logging_setup import get_logger
from tritonforge.problems.sizing import (
    DEFAULT_ELEMENT_BUDGET,
    DEFAULT_FLOPS_PER_ELEMENT,
    module_constants,
    rewrite_constants,
)
from tritonforge.types import Problem

__all__ = [
    "DEFAULT_ELEMENT_BUDGET",
    "ScaleResult",
    "default_cache_dir",
    "scale_problems",
    "scale_source",
]

log = get_logger(__name__)


class ScaleResult(BaseModel):
    """Outcome of scaling one source. `new_src` is the original when `ok` is False."""

    model_config = ConfigDict(extra="forbid")

    problem_id: str = ""
    ok: bool
    reason: str = Field("", description="'scaled', 'already within budget', or why it failed.")
    new_src: str
    changed: dict[str, tuple[Any, Any]] = Field(
        default_factory=dict, description="name: (old, new)"
    )
    input_elements_before: int | None = None
    input_elements_after: int | None = None
    param_elements_before: int | None = None
    param_elements_after: int | None = None
    output_elements_before: int | None = None
    output_elements_after: int | None = None
    flops_before: int | None = None
    flops_after: int | None = None
    cpu_forward_s: float | None = Field(None, description="One CPU forward of the scaled problem.")
    budget_multiplier: int = Field(1, description=">1: only a gentler budget gave a valid problem.")
    notes: list[str] = Field(default_factory=list)
    seconds: float = 0.0


def _task(src: str, factor: float | None, budget: int | None, flop_budget: int | None) -> dict:
    if factor is None and budget is None:
        raise ValueError("scale_source needs factor= or element_budget=")
    if budget is not None and flop_budget is None:
        flop_budget = budget * DEFAULT_FLOPS_PER_ELEMENT
    return {"src": src, "factor": factor, "budget": budget, "flop_budget": flop_budget}


def _result(src: str, reply: dict[str, Any], problem_id: str, seconds: float) -> ScaleResult:
    old = module_constants(src)
    assign = {
        k: tuple(v) if isinstance(old.get(k), tuple) else v
        for k, v in reply.get("assign", {}).items()
    }
    ok = bool(reply.get("ok"))
    notes = list(reply.get("notes", [])) + ([reply["traceback"]] if reply.get("traceback") else [])
    counts = {
        f"{field}_{when}": (reply.get(when) or {}).get(key)
        for when in ("before", "after")
        for field, key in (("input_elements", "inputs"), ("param_elements", "params"),
                           ("output_elements", "outputs"), ("flops", "flops"))
    }  # fmt: skip
    return ScaleResult(
        problem_id=problem_id,
        ok=ok,
        reason=reply.get("reason", ""),
        new_src=rewrite_constants(src, assign) if ok else src,
        changed={k: (old.get(k), v) for k, v in assign.items()} if ok else {},
        cpu_forward_s=reply.get("cpu_forward_s"),
        budget_multiplier=reply.get("budget_multiplier", 1),
        notes=notes,
        seconds=round(seconds, 3),
        **counts,
    )


def default_cache_dir() -> Path:
    """`$TRITONFORGE_CACHE_DIR/scale`, else `~/.cache/tritonforge/scale`."""
    root = os.environ.get("TRITONFORGE_CACHE_DIR") or Path.home() / ".cache" / "tritonforge"
    return Path(root) / "scale"


def scale_source(
    src: str,
    *,
    factor: float | None = None,
    element_budget: int | None = None,
    flop_budget: int | None = None,
    timeout: float = 120.0,
    problem_id: str = "",
) -> ScaleResult:
    """Shrink the size constants of `src` by `factor` and/or until it fits `element_budget`.

    The budget bounds input, parameter and output elements (each) and, by default,
    `element_budget * DEFAULT_FLOPS_PER_ELEMENT` matmul/conv FLOPs. The search and a CPU forward
    of the result run in a child process with `timeout`; failures come back as `ok=False`.
    """
    from tritonforge.problems.scale_worker import WorkerProcess

    task = _task(src, factor, element_budget, flop_budget)
    worker = WorkerProcess(threads=max(1, os.cpu_count() or 1))
    t0 = time.perf_counter()
    try:
        reply = worker.request(task, timeout)
    finally:
        worker.close()
    return _result(src, reply, problem_id, time.perf_counter() - t0)


def _request_all(
    tasks: dict[int, dict[str, Any]], workers: int, timeout: float, progress: bool
) -> Iterator[tuple[int, tuple[dict[str, Any], float]]]:
    """Run tasks on a pool of `workers` child processes; yields (key, (reply, seconds))."""
    from tqdm import tqdm

    from tritonforge.problems.scale_worker import WorkerProcess

    if not tasks:
        return
    workers = max(1, min(workers, len(tasks)))
    pool: Queue[WorkerProcess] = Queue()
    for _ in range(workers):
        pool.put(WorkerProcess(threads=max(1, (os.cpu_count() or 1) // workers)))

    def job(i: int) -> tuple[int, tuple[dict[str, Any], float]]:
        worker = pool.get()
        t0 = time.perf_counter()
        try:
            return i, (worker.request(tasks[i], timeout), time.perf_counter() - t0)
        finally:
            pool.put(worker)

    bar = tqdm(total=len(tasks), desc="scaling", unit="problem", disable=not progress)
    try:
        with ThreadPoolExecutor(workers) as ex:
            for fut in as_completed([ex.submit(job, i) for i in tasks]):
                yield fut.result()
                bar.update(1)
    finally:
        bar.close()
        while not pool.empty():
            pool.get().close()


def scale_problems(
    problems: Sequence[Problem],
    element_budget: int | None = DEFAULT_ELEMENT_BUDGET,
    workers: int = 2,
    *,
    factor: float | None = None,
    flop_budget: int | None = None,
    timeout: float = 120.0,
    cache_dir: Path | None = None,
    progress: bool = True,
) -> tuple[list[Problem], list[ScaleResult]]:
    """Scale many problems in `workers` child processes (progress bar on stderr).

    Returns (the problems that scaled, with size 'scaled'; one ScaleResult per input problem,
    in input order). `cache_dir` (None: no cache) keeps results keyed by source and budget.
    """
    from tritonforge.problems.scale_worker import cache_get, cache_path, cache_put

    tasks = [_task(p.reference_src, factor, element_budget, flop_budget) for p in problems]
    paths = [cache_path(cache_dir, t) if cache_dir else None for t in tasks]
    replies: list[dict[str, Any] | None] = [cache_get(p) for p in paths]
    seconds = [0.0] * len(problems)
    todo = {i: tasks[i] for i, r in enumerate(replies) if r is None}
    for i, (reply, secs) in _request_all(todo, workers, timeout, progress):
        replies[i], seconds[i] = reply, secs
        cache_put(paths[i], reply)
    report = [
        _result(p.reference_src, r or {}, p.id, s)
        for p, r, s in zip(problems, replies, seconds, strict=True)
    ]
    scaled = [
        p.model_copy(
            update={
                "reference_src": r.new_src,
                "size": "scaled",
                "meta": {**p.meta, "scaled": {k: list(v) for k, v in r.changed.items()}},
            }
        )
        for p, r in zip(problems, report, strict=True)
        if r.ok
    ]
    for r in report:
        if not r.ok:
            log.info("cannot scale %s: %s", r.problem_id, r.reason)
    return scaled, report
