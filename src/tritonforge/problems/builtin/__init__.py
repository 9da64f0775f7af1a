"""The built-in problem suite: KernelBench-format references, each with a hand-written Triton solution.

Covers: reading every `<category>/manifest.toml` beside this module, validating it, and building
`Problem` records at the `cpu` or `gpu` size preset (`load_builtin`); registers itself as the
suite "builtin". Does not cover: running or judging problems (see evaluation), KernelBench loaders,
scaling to arbitrary budgets (see problems.scaling).

Manifest format (one `[[problem]]` table per problem):

    number   = 1               # unique int across the suite (part A 1..49, part B 50..99)
    name     = "relu"          # unique snake_case; the id is "builtin/<name>"
    level    = 1               # 1 single op, 2 fusion
    file     = "relu.py"       # reference (KernelBench format), constants at GPU size
    solution = "relu_triton.py"  # a correct ModelNew
    cpu      = { N = 4096 }    # module-constant overrides of the `cpu` preset (optional)
    gpu      = {}              # overrides of the `gpu` preset (optional)
    flops    = "N"             # optional: useful FLOPs of one forward, over the constants
    bytes    = "8 * N"         # optional: minimum bytes one forward moves, over the constants
    atol / rtol                # optional tolerance overrides
    description                # optional free text, kept in meta
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

from tritonforge.logging_setup import get_logger
from tritonforge.problems import register_suite
from tritonforge.problems.sizing import SizingError, module_constants, rewrite_constants
from tritonforge.types import Problem

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["ROOT", "SIZES", "ManifestError", "load_builtin"]

log = get_logger(__name__)

ROOT = Path(__file__).resolve().parent
SIZES = ("cpu", "gpu")
_REQUIRED = ("number", "name", "level", "file", "solution")
_OPTIONAL = ("cpu", "gpu", "flops", "bytes", "atol", "rtol", "description")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


class ManifestError(ValueError):
    """A manifest entry that is malformed, points at missing files or clashes with another."""


def load_builtin(size: str = "cpu", root: Path | str | None = None) -> list[Problem]:
    """All built-in problems at preset `size` ("cpu" or "gpu"), sorted by problem number.

    `root` (tests only) replaces the package folder that holds the `<category>/` folders.
    Raises ValueError for an unknown size, ManifestError / SizingError for a bad manifest.
    """
    if size not in SIZES:
        raise ValueError(f"unknown size preset {size!r}; valid: {', '.join(SIZES)}")
    base = Path(root) if root is not None else ROOT
    problems: list[Problem] = []
    for manifest in sorted(base.glob("*/manifest.toml")):
        problems.extend(_load_manifest(manifest, size))
    _check_unique(problems)
    problems.sort(key=lambda p: p.problem_id)
    log.debug("loaded %d built-in problems at size %s from %s", len(problems), size, base)
    return problems


def _load_manifest(manifest: Path, size: str) -> list[Problem]:
    try:
        data = tomllib.loads(manifest.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{manifest}: invalid TOML: {exc}") from exc
    extra = set(data) - {"problem"}
    if extra:
        raise ManifestError(f"{manifest}: unknown top-level keys {sorted(extra)}; only [[problem]]")
    entries = data.get("problem", [])
    if not isinstance(entries, list) or not entries:
        raise ManifestError(f"{manifest}: no [[problem]] entries")
    return [_build_problem(manifest, entry, size) for entry in entries]


def _build_problem(manifest: Path, entry: dict[str, Any], size: str) -> Problem:
    """One validated Problem from one [[problem]] table."""
    where = f"{manifest}: problem {entry.get('name', entry.get('number', '?'))!r}"
    _check_keys(where, entry)
    folder = manifest.parent
    ref_path = _member_file(where, folder, entry["file"], "file")
    sol_path = _member_file(where, folder, entry["solution"], "solution")
    overrides = entry.get(size, {})
    if not isinstance(overrides, dict):
        raise ManifestError(f"{where}: `{size}` must be a table of constant overrides")
    try:
        reference_src = rewrite_constants(ref_path.read_text(), overrides)
        ast.parse(reference_src)
    except SizingError as exc:
        raise SizingError(f"{where}: `{size}` overrides: {exc}") from exc
    except SyntaxError as exc:
        raise ManifestError(f"{where}: {ref_path.name} does not parse: {exc}") from exc
    return Problem(
        id=f"builtin/{entry['name']}",
        suite="builtin",
        level=entry["level"],
        problem_id=entry["number"],
        name=entry["name"],
        category=folder.name,
        reference_src=reference_src,
        size=size,
        solution_src=sol_path.read_text(),
        atol=_tolerance(where, entry, "atol"),
        rtol=_tolerance(where, entry, "rtol"),
        flops=_evaluate(where, entry, "flops", reference_src),
        bytes_moved=_evaluate(where, entry, "bytes", reference_src),
        meta={
            "file": f"{folder.name}/{ref_path.name}",
            "solution_file": f"{folder.name}/{sol_path.name}",
            "overrides": dict(overrides),
            "description": entry.get("description", ""),
        },
    )


def _check_keys(where: str, entry: dict[str, Any]) -> None:
    missing = [k for k in _REQUIRED if k not in entry]
    if missing:
        raise ManifestError(f"{where}: missing keys {missing}")
    unknown = sorted(set(entry) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise ManifestError(f"{where}: unknown keys {unknown}; allowed: {[*_REQUIRED, *_OPTIONAL]}")
    for key in ("number", "level"):
        value = entry[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ManifestError(f"{where}: `{key}` must be a positive integer, got {value!r}")
    if not isinstance(entry["name"], str) or not _NAME_RE.match(entry["name"]):
        raise ManifestError(f"{where}: `name` must be snake_case, got {entry['name']!r}")


def _member_file(where: str, folder: Path, name: Any, key: str) -> Path:
    """The file `name` inside `folder` (no paths outside it), which must exist."""
    if not isinstance(name, str) or not name or Path(name).name != name:
        raise ManifestError(
            f"{where}: `{key}` must be a plain file name in {folder.name}/, got {name!r}"
        )
    path = folder / name
    if not path.is_file():
        raise ManifestError(f"{where}: `{key}` file {path} does not exist")
    return path


def _tolerance(where: str, entry: dict[str, Any], key: str) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ManifestError(f"{where}: `{key}` must be a positive number, got {value!r}")
    return float(value)


def _evaluate(where: str, entry: dict[str, Any], key: str, source: str) -> float | None:
    """A number, or an expression over the module-level constants of `source`, as a float."""
    expr = entry.get(key)
    if expr is None:
        return None
    if isinstance(expr, (int, float)) and not isinstance(expr, bool):
        return float(expr)
    if not isinstance(expr, str):
        raise ManifestError(f"{where}: `{key}` must be a number or an expression string")
    try:
        ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ManifestError(f"{where}: `{key}` = {expr!r} is not an expression: {exc.msg}") from exc
    target = "__tritonforge_value__"
    env = module_constants(f"{source}\n{target} = {expr}\n")
    value = env.get(target)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        known = sorted(k for k in env if k != target)
        raise ManifestError(
            f"{where}: `{key}` = {expr!r} does not evaluate to a number over the constants {known}"
        )
    return float(value)


def _check_unique(problems: list[Problem]) -> None:
    by_number: dict[int, str] = {}
    by_name: dict[str, str] = {}
    for p in problems:
        here = f"{p.category}/manifest.toml problem {p.name!r} (number {p.problem_id})"
        if p.problem_id in by_number:
            raise ManifestError(
                f"duplicate problem number {p.problem_id}: {by_number[p.problem_id]} and {here}"
            )
        if p.name in by_name:
            raise ManifestError(f"duplicate problem name {p.name!r}: {by_name[p.name]} and {here}")
        by_number[p.problem_id] = here
        by_name[p.name] = here


register_suite("builtin", load_builtin, sizes=SIZES)
