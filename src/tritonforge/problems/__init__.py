"""Problems: the built-in suite, KernelBench loaders, size presets and selection.

Covers: a registry of suites keyed by name (`SUITES`), each a function returning Problems at a
size preset with the presets it knows (`SUITE_SIZES`), `known_suites`, `check_suite` (name and
size checked before anything loads, with "did you mean"), and `select` filters. Does not cover:
running problems (see evaluation). A new suite is a registry entry: its module calls
`register_suite("name", loader, sizes=(...))`; a project suite is also named in `SUITES`'s table
(name -> the module that registers it), so its name is known before that module is imported.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable

from tritonforge.config.names import unknown_name
from tritonforge.config.registry import Registry
from tritonforge.types import Problem

SuiteLoader = Callable[..., list[Problem]]
# name -> loader; the project's suites are named by the module that registers them when imported
SUITES: Registry[SuiteLoader] = Registry(
    "suite",
    {
        "builtin": "tritonforge.problems.builtin",
        "kernelbench": "tritonforge.problems.kernelbench",
        "variants": "tritonforge.problems.variants",
    },
)
SUITE_SIZES: dict[str, tuple[str, ...]] = {}


class UnknownSuite(KeyError):
    """A suite name or size preset that no registered suite knows; str() is the message."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def register_suite(name: str, loader: SuiteLoader, sizes: tuple[str, ...] = ()) -> None:
    """Register `loader` as suite `name`; `sizes` lists its size presets (empty: not checked)."""
    SUITE_SIZES[name] = tuple(sizes)
    SUITES.register(name, loader)


def known_suites() -> list[str]:
    """Every suite name: the project's own and any registered (nothing is imported)."""
    return SUITES.names()


def check_suite(name: str, size: str | None = None) -> None:
    """Raise UnknownSuite (with the known names and a "did you mean") for an unknown suite or
    size preset; imports the suite's module (for its size presets) but loads no problem."""
    if name not in SUITES:
        raise UnknownSuite(unknown_name("suite", name, SUITES))
    SUITES.lookup(name)
    sizes = SUITE_SIZES.get(name, ())
    if size is not None and sizes and size not in sizes:
        raise UnknownSuite(unknown_name(f"{name} size preset", size, sizes))


def load_suite(name: str, **kwargs) -> list[Problem]:
    """Load a registered suite (`builtin`, `kernelbench`, ...); kwargs go to its loader."""
    check_suite(name, kwargs.get("size"))
    return SUITES.lookup(name)(**kwargs)


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
