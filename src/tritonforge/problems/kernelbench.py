"""KernelBench problems: loaders for a directory, JSONL/parquet records and the Hugging Face dataset.

Covers: `load_kernelbench_dir` (KernelBench layout `root/levelN/ID_Name.py`, also a checkout of
the KernelBench repository or of the original TritonForge release, all four levels),
`load_kernelbench_records` (JSONL or parquet with level, problem_id, name, source|code; or the
original TritonForge release's JSONL: prompt, label, extra_info), level-4 sources made offline
(problems/hf_offline.py),
`load_kernelbench_hf` (the `datasets` library, optional, online or from its cache), source
resolution, a coarse category guess, and `load_kernelbench`, registered as suite "kernelbench"
(sizes "original"/"gpu" as published, "scaled"/"cpu" shrunk by `problems.scaling`).
Does not cover: running problems (evaluation) or how scaling works (problems.scaling, sizing).
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tritonforge.logging_setup import get_logger
from tritonforge.problems import register_suite
from tritonforge.problems.hf_offline import offline_source, uses_hub
from tritonforge.problems.scaling import DEFAULT_ELEMENT_BUDGET, default_cache_dir, scale_problems
from tritonforge.types import Problem

log = get_logger(__name__)

SUITE = "kernelbench"
HF_DATASET = "ScalingIntelligence/KernelBench"
ENV_SOURCE = "TRITONFORGE_KERNELBENCH"
# ../shared/data/kernelbench beside the repository root (src/tritonforge/problems/ -> repo).
SHARED_DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "kernelbench"
SIZES = {"original": "original", "gpu": "original", "scaled": "scaled", "cpu": "scaled"}
_FILE_RE = re.compile(r"^(\d+)_(.+)\.py$")
_LEVEL_RE = re.compile(r"^level_?(\d+)$")


class KernelBenchError(ValueError):
    """KernelBench data that cannot be found or read; the message says where and why."""


# --------------------------------------------------------------------------------------------
# Records -> Problems
# --------------------------------------------------------------------------------------------

# First match wins; level >= 2 problems are fusions by construction.
_CATEGORY_RULES: list[tuple[str, tuple[str, ...]]] = [
    ("loss", ("loss",)),
    ("conv", ("conv",)),
    ("pooling", ("pool",)),
    ("norm", ("norm",)),
    ("matmul", ("matmul", "gemm", "bmm", "matrix", "linear", "einsum", "attention")),
    (
        "activation",
        (
            "relu",
            "sigmoid",
            "tanh",
            "gelu",
            "swish",
            "softmax",
            "softplus",
            "softsign",
            "elu",
            "hardtanh",
            "mish",
        ),
    ),
    ("reduction", ("sum", "mean", "max", "min", "argm", "reduction", "cum", "scan", "prod")),
]


def guess_category(name: str, level: int = 1) -> str:
    """A coarse category from the problem name: level >= 2 is 'fusion', else by keyword."""
    if level >= 2:
        return "fusion"
    low = name.lower()
    for category, keys in _CATEGORY_RULES:
        if any(k in low for k in keys):
            return category
    return "other"


def _clean_name(name: str, problem_id: int) -> str:
    name = name[:-3] if name.endswith(".py") else name
    prefix = f"{problem_id}_"
    return name[len(prefix) :] if name.startswith(prefix) else name


def make_problem(level: int, problem_id: int, name: str, source: str, origin: str = "") -> Problem:
    """One KernelBench problem at its published size. A source that loads a Hugging Face model
    from the Hub (level 4) is rewritten to build it from its config offline (hf_offline.py);
    one that cannot be records why in `meta["cannot_run"]`."""
    name = _clean_name(name, problem_id)
    meta: dict[str, Any] = {"origin": origin} if origin else {}
    if uses_hub(source):
        offline, why = offline_source(source)
        if why:
            meta["cannot_run"] = why
        else:
            source = offline
            meta["offline"] = "Hugging Face model built from its config, without weights"
    return Problem(
        id=f"{SUITE}/L{level}/{problem_id}_{name}",
        suite=SUITE,
        level=level,
        problem_id=problem_id,
        name=name,
        category=guess_category(name, level),
        reference_src=source,
        size="original",
        meta=meta,
    )


def _from_tritonforge(rec: dict[str, Any]) -> dict[str, Any]:
    """A record of the original TritonForge release's JSONL (`prompt`, `label` = the reference
    source, `extra_info` = level, problem_id as a string, problem_name) in our field names."""
    info = rec.get("extra_info")
    if "label" not in rec or not isinstance(info, dict):
        return rec
    return {
        "level": info.get("level"),
        "problem_id": info.get("problem_id"),
        "name": info.get("problem_name", rec.get("instance_id")),
        "source": rec["label"],
    }


def _record_to_problem(rec: Any, where: str) -> Problem:
    """Validate one record (`where` = 'file:line' for the error message)."""
    if not isinstance(rec, dict):
        raise KernelBenchError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    rec = _from_tritonforge(rec)
    source = rec.get("source", rec.get("code"))
    missing = [k for k in ("level", "problem_id", "name") if rec.get(k) is None]
    if source is None:
        missing.append("source (or code)")
    if missing:
        raise KernelBenchError(f"{where}: record lacks {', '.join(missing)}")
    try:
        level, problem_id = int(rec["level"]), int(rec["problem_id"])
    except (TypeError, ValueError) as exc:
        raise KernelBenchError(f"{where}: level/problem_id must be integers ({exc})") from None
    if not isinstance(rec["name"], str) or not isinstance(source, str) or not source.strip():
        raise KernelBenchError(f"{where}: name and source must be non-empty strings")
    return make_problem(level, problem_id, rec["name"], source, origin=where)


def _sorted(problems: Iterable[Problem], levels: Iterable[int] | None) -> list[Problem]:
    wanted = set(levels) if levels is not None else None
    out = [p for p in problems if wanted is None or p.level in wanted]
    seen: set[str] = set()
    for p in out:
        if p.id in seen:
            raise KernelBenchError(f"duplicate problem {p.id} (from {p.meta.get('origin', '?')})")
        seen.add(p.id)
    return sorted(out, key=lambda p: (p.level, p.problem_id))


# --------------------------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------------------------


def _level_dirs(root: Path) -> list[Path]:
    """The levelN folders of `root`, of `root/KernelBench` (a KernelBench checkout) or of
    `root/KBenchEval/KernelBench` (the original TritonForge release)."""
    for base in (root, root / "KernelBench", root / "KBenchEval" / "KernelBench"):
        if base.is_dir():
            found = sorted(d for d in base.iterdir() if d.is_dir() and _LEVEL_RE.match(d.name))
            if found:
                return found
    return []


def load_kernelbench_dir(root: str | Path, levels: Iterable[int] | None = None) -> list[Problem]:
    """Problems from a KernelBench layout: `root/levelN/ID_Name.py`, or a checkout of the
    KernelBench repository (`root/KernelBench/level1/...`, all four levels) or of the original
    TritonForge release (`root/KBenchEval/KernelBench/level1/...`)."""
    root = Path(root)
    levels = None if levels is None else set(levels)
    level_dirs = _level_dirs(root)
    if not level_dirs:
        raise KernelBenchError(
            f"{root}: no levelN/ folders (expected root/level1/19_ReLU.py or "
            "root/KernelBench/level1/19_ReLU.py)"
        )
    problems = []
    for d in level_dirs:
        level = int(_LEVEL_RE.match(d.name).group(1))  # type: ignore[union-attr]
        if levels is not None and level not in levels:
            continue
        for f in sorted(d.glob("*.py")):
            m = _FILE_RE.match(f.name)
            if not m:
                log.debug("skipping %s (not ID_Name.py)", f)
                continue
            problems.append(make_problem(level, int(m.group(1)), m.group(2), f.read_text(), str(f)))
    return _sorted(problems, levels)


def _iter_records(path: Path) -> Iterator[tuple[Any, str]]:
    """(record, 'file:line') from JSONL, or (record, 'file:row N') from parquet."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as exc:
            raise KernelBenchError(f"{path}: cannot read parquet ({exc})") from None
        for i, row in enumerate(rows):
            yield row, f"{path}:row {i}"
        return
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line), f"{path}:{lineno}"
            except json.JSONDecodeError as exc:
                raise KernelBenchError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None


def load_kernelbench_records(
    path: str | Path, levels: Iterable[int] | None = None
) -> list[Problem]:
    """Problems from a JSONL file (one object per line) or a parquet file, or a folder of them.

    Fields: level, problem_id, name, source (`code` accepted as an alias).
    """
    path = Path(path)
    levels = None if levels is None else set(levels)
    if path.is_dir():
        files = sorted([*path.glob("*.jsonl"), *path.glob("*.parquet")])
        if not files:
            raise KernelBenchError(f"{path}: no .jsonl or .parquet files")
    elif path.is_file():
        files = [path]
    else:
        raise KernelBenchError(f"{path}: no such file or folder")
    problems = [_record_to_problem(rec, where) for f in files for rec, where in _iter_records(f)]
    return _sorted(problems, levels)


def _hub_reachable(timeout: float = 3.0) -> bool:
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = re.sub(r"^https?://", "", endpoint).split("/")[0].split(":")[0]
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def load_kernelbench_hf(
    name: str = HF_DATASET, levels: Iterable[int] | None = None
) -> list[Problem]:
    """Problems from the Hugging Face dataset (splits level_1..level_4, column `code`).

    Needs `pip install datasets` and network, or HF_HUB_OFFLINE=1 with the dataset cached.
    Offline without a cache it fails within seconds rather than hanging on retries.
    """
    try:
        import datasets  # type: ignore[import-not-found]
    except ImportError:
        raise KernelBenchError(
            f"loading {name} from Hugging Face needs `pip install datasets` and network access; "
            "or pass a KernelBench folder/JSONL/parquet path"
        ) from None
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    if not offline and not _hub_reachable():
        raise KernelBenchError(
            f"cannot reach the Hugging Face Hub to load {name} (offline?); set HF_HUB_OFFLINE=1 "
            "to use a cached copy, or pass a KernelBench folder/JSONL/parquet path"
        )
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "30")
    wanted = sorted(set(levels)) if levels is not None else [1, 2, 3, 4]
    problems = []
    for level in wanted:
        try:
            split = datasets.load_dataset(name, split=f"level_{level}")
        except Exception as exc:
            raise KernelBenchError(f"{name} split level_{level}: {exc}") from None
        for i, rec in enumerate(split):
            problems.append(_record_to_problem(dict(rec), f"{name}:level_{level}:row {i}"))
    return _sorted(problems, levels)


def resolve_source(source: str | Path | None = None) -> str | Path:
    """Explicit path > $TRITONFORGE_KERNELBENCH > ../shared/data/kernelbench; `hf[:NAME]` = Hub."""
    for candidate, origin in ((source, "argument"), (os.environ.get(ENV_SOURCE), ENV_SOURCE)):
        if candidate:
            text = str(candidate)
            if text == "hf" or text.startswith("hf:"):
                return text
            if not Path(text).exists():
                raise KernelBenchError(
                    f"KernelBench source {text!r} (from {origin}) does not exist"
                )
            return Path(text)
    if SHARED_DATA.exists():
        return SHARED_DATA
    raise KernelBenchError(
        "no KernelBench data: pass a path (a KernelBench checkout's folder with level1/..., "
        f"or JSONL/parquet records), set ${ENV_SOURCE}, place it in {SHARED_DATA}, "
        f"or use 'hf' / 'hf:{HF_DATASET}' (needs `pip install datasets` and network)"
    )


def load_kernelbench_original(
    source: str | Path | None = None, levels: Iterable[int] | None = None
) -> list[Problem]:
    """KernelBench problems at their published size from wherever `resolve_source` points."""
    where = resolve_source(source)
    if isinstance(where, str):  # "hf" or "hf:NAME"
        return load_kernelbench_hf(where[3:] or HF_DATASET, levels)
    if where.is_dir() and _level_dirs(where):
        return load_kernelbench_dir(where, levels)
    return load_kernelbench_records(where, levels)


def load_kernelbench(
    source: str | Path | None = None,
    levels: Iterable[int] | None = None,
    size: str = "original",
    budget: int | None = None,
    factor: float | None = None,
    workers: int = 2,
    cache: bool = True,
) -> list[Problem]:
    """The "kernelbench" suite. size: original|gpu (as published) or scaled|cpu.

    Scaled: each problem shrunk to `budget` elements (default sizing.DEFAULT_ELEMENT_BUDGET)
    and/or by `factor`; problems that cannot be scaled are left out (logged with the reason).
    Results are cached under scaling.default_cache_dir() unless `cache` is False.
    """
    if size not in SIZES:
        raise KernelBenchError(f"unknown size {size!r}; use one of {sorted(SIZES)}")
    problems = load_kernelbench_original(source, levels)
    if SIZES[size] == "original":
        return problems
    return scale_kernelbench(problems, budget, factor, workers, cache)


def scale_kernelbench(
    problems: list[Problem],
    budget: int | None = None,
    factor: float | None = None,
    workers: int = 2,
    cache: bool = True,
) -> list[Problem]:
    """The problems that scale to `budget` (default sizing.DEFAULT_ELEMENT_BUDGET) / `factor`."""
    if budget is None and factor is None:
        budget = DEFAULT_ELEMENT_BUDGET
    scaled, report = scale_problems(
        problems,
        budget,
        workers=workers,
        factor=factor,
        cache_dir=default_cache_dir() if cache else None,
    )
    failed = [r for r in report if not r.ok]
    if failed:
        log.warning(
            "%d of %d KernelBench problems could not be scaled and are left out: %s",
            len(failed),
            len(report),
            ", ".join(r.problem_id for r in failed),
        )
    return scaled


register_suite(SUITE, load_kernelbench, sizes=tuple(SIZES))


DECOY_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def _unused_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
"""


def self_candidate(reference_src: str, decoy: bool = False) -> str:
    """The reference with its Model class renamed ModelNew (super() calls included); with
    `decoy`, an unused @triton.jit kernel added (strict mode must still reject it)."""
    out = re.sub(r"\bModel\b", "ModelNew", reference_src)
    return out + DECOY_KERNEL if decoy else out
