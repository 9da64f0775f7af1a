"""Problems: the built-in suite, KernelBench loaders, size presets and selection.

Covers: a registry of suites keyed by name (`SUITES`), each a function returning Problems at a
size preset, and `select` filters. Does not cover: running problems (see evaluation).
A new suite is a registry entry: `register_suite("name", loader)`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable

from tritonforge.types import Problem

SuiteLoader = Callable[..., list[Problem]]
SUITES: dict[str, SuiteLoader] = {}


def register_suite(name: str, loader: SuiteLoader) -> None:
    SUITES[name] = loader


def load_suite(name: str, **kwargs) -> list[Problem]:
    """Load a registered suite (`builtin`, `kernelbench`, ...); kwargs go to its loader."""
    _ensure_registered(name)
    if name not in SUITES:
        raise KeyError(f"unknown suite {name!r}; known: {sorted(SUITES)}")
    return SUITES[name](**kwargs)


def select(
    problems: list[Problem],
    level: int | None = None,
    name: str | None = None,
    category: str | None = None,
    ids: list[str] | None = None,
) -> list[Problem]:
    """Filter by level, name glob (case-insensitive, matches name or id), category, exact ids."""
    out = problems
    if level is not None:
        out = [p for p in out if p.level == level]
    if name:
        pat = name.lower() if any(c in name for c in "*?[") else f"*{name.lower()}*"
        out = [
            p
            for p in out
            if fnmatch.fnmatch(p.name.lower(), pat) or fnmatch.fnmatch(p.id.lower(), pat)
        ]
    if category:
        out = [p for p in out if p.category == category]
    if ids:
        wanted = set(ids)
        out = [p for p in out if p.id in wanted or p.name in wanted]
    return out


# Modules that register the project's own suites when imported.
_SUITE_MODULES = {
    "builtin": "tritonforge.problems.builtin",
    "kernelbench": "tritonforge.problems.kernelbench",
    "variants": "tritonforge.problems.variants",
}


def _ensure_registered(name: str | None = None) -> None:
    """Import the module of suite `name` (or of every known suite) if not registered yet.

    A suite module that is missing from this checkout is skipped; its own import errors are not.
    """
    import importlib

    for suite, module in _SUITE_MODULES.items():
        if suite in SUITES or (name is not None and suite != name):
            continue
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
