"""Messages for unknown names: the known ones and a "did you mean" from close matches.

Covers: `suggest` (close matches of a name among known ones, case-insensitive) and
`unknown_name` (the one-line message every registry lookup and config check uses:
"unknown suite 'kernelbenh'; did you mean 'kernelbench'? known: builtin, kernelbench").
Does not cover: the registries themselves; imports nothing from the rest of the package.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["suggest", "unknown_name"]

MAX_LISTED = 12


def suggest(name: str, known: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """Up to `n` known names close to `name` (best first), compared case-insensitively."""
    options = [str(k) for k in known]
    lowered = {k.lower(): k for k in options}
    hits = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=cutoff)
    prefixed = [k for k in options if name and k.lower().startswith(name.lower())]
    out: list[str] = []
    for k in [lowered[h] for h in hits] + prefixed:
        if k not in out and k != name:
            out.append(k)
    return out[:n]


def unknown_name(kind: str, name: str, known: Iterable[str]) -> str:
    """`unknown KIND 'NAME'; did you mean 'X'? known: a, b, c` (the known list capped)."""
    options = sorted({str(k) for k in known})
    close = suggest(name, options)
    text = f"unknown {kind} {name!r}"
    if close:
        text += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    if not options:
        return text + " (none are registered)"
    listed = ", ".join(options[:MAX_LISTED])
    more = f", ... ({len(options)} in all)" if len(options) > MAX_LISTED else ""
    return f"{text} known: {listed}{more}" if close else f"{text}; known: {listed}{more}"
