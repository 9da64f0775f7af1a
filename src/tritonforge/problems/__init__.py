"""Problems: the built-in suite, KernelBench loaders, size presets and selection.

Covers: a registry of suites keyed by name (`SUITES`), each a function returning Problems at a
size preset with the presets it knows (`SUITE_SIZES`), `known_suites`, `check_suite` (name and
size checked before anything loads, with "did you mean"), and `select` filters. Does not cover:
running problems (see evaluation). A new suite is a registry entry:
`register_suite("name", loader, sizes=(...))`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable

from tritonforge.config.names import unknown_name
from tritonforge.types import Problem

SuiteLoader = Callable[..., list[Problem]]
SUITES: dict[str, SuiteLoader] = {}
SUITE_SIZES: dict[str, tuple[str, ...]] = {}


class UnknownSuite(KeyError):
    """A suite name or size preset that no registered suite knows; str() is the message."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def register_suite(name: str, loader: SuiteLoader, sizes: tuple[str, ...] = ()) -> None:
    """Register `loader` as suite `name`; `sizes` lists its size presets (empty: not checked)."""
    SUITES[name] = loader
    SUITE_SIZES[name] = tuple(sizes)


def known_suites() -> list[str]:
    """Every suite name: the project's own (imported now if needed) and any registered."""
    _ensure_registered(None)
    return sorted(SUITES)


def check_suite(name: str, size: str | None = None) -> None:
    """Raise UnknownSuite (with the known names and a "did you mean") for an unknown suite or
    size preset; loads no problem."""
    _ensure_registered(name if name in _SUITE_MODULES else None)
    if name not in SUITES:
        raise UnknownSuite(unknown_name("suite", name, SUITES))
    sizes = SUITE_SIZES.get(name, ())
    if size is not None and sizes and size not in sizes:
        raise UnknownSuite(unknown_name(f"{name} size preset", size, sizes))


def load_suite(name: str, **kwargs) -> list[Problem]:
    """Load a registered suite (`builtin`, `kernelbench`, ...); kwargs go to its loader."""
    check_suite(name, kwargs.get("size"))
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
}


def _ensure_registered(name: str | None = None) -> None:
    """Import the module of suite `name` (or of every project suite) if not registered yet."""
    import importlib

    for suite, module in _SUITE_MODULES.items():
        if suite not in SUITES and (name is None or suite == name):
            importlib.import_module(module)
