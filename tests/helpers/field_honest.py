"""The honest field corpus (tests/eval/corpus/field_honest): manifest cases and their KernelBench
problems, for the CPU test, the GPU test and benchmarks/field_honest.py.

Covers: `cases()` (manifest entries with their source under 'source'), `data_available()` (the
shared KernelBench data is there), `problems(cases, size)` (case file -> Problem, "original" as
published or "cpu" scaled to the CPU budget; cases whose problem cannot be scaled are left out),
`expected(case, preset, device)` ((status, rule) the manifest expects). Not a library: tests and
benchmarks only (benchmarks put the tests folder on sys.path to import it).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tritonforge.types import Problem

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FOLDER = Path(__file__).resolve().parents[1] / "eval" / "corpus" / "field_honest"
PRESETS = ("strict", "kernelbench", "tritonforge")


def cases() -> list[dict[str, Any]]:
    entries = tomllib.loads((FOLDER / "manifest.toml").read_text())["case"]
    for e in entries:
        e["source"] = (FOLDER / e["file"]).read_text()
    return entries


def data_available() -> bool:
    from tritonforge.problems.kernelbench import KernelBenchError, resolve_source

    try:
        resolve_source()
    except KernelBenchError:
        return False
    return True


def _level_id(case: dict[str, Any]) -> tuple[int, int]:
    level, pid = case["problem"].removeprefix("kernelbench:L").split("/")
    return int(level), int(pid)


def problems(chosen: list[dict[str, Any]], size: str = "original") -> dict[str, Problem]:
    """case file -> its problem at `size` ("original" or "cpu"); unscalable ones left out."""
    from tritonforge.problems.kernelbench import load_kernelbench_original, scale_kernelbench

    wanted = {_level_id(c): c["file"] for c in chosen}
    levels = sorted({lv for lv, _ in wanted})
    found = [
        p for p in load_kernelbench_original(None, levels) if (p.level, p.problem_id) in wanted
    ]
    if size == "cpu":
        found = scale_kernelbench(found)
    return {wanted[(p.level, p.problem_id)]: p for p in found}


def expected(case: dict[str, Any], preset: str, device: str) -> tuple[str, str | None]:
    """(status, rule) the manifest expects under `preset` on `device` ("cuda" or "cpu")."""
    if device == "cpu" and case["cpu"] not in ("same", "skip"):
        return case["cpu"], None
    return case[preset], case.get(f"{preset}_rule")
