"""One registry helper for every name -> entry table of the package (losses, returns, engines, ...).

Covers: `Registry`, a read-only mapping from names to entries, with
- lazy entries: a string `"module:attr"` (the module is imported and the attribute read, dotted
  attributes allowed, on first use) or `"module"` (importing that module registers the entry),
  so a torch-free registry can name torch-heavy code without importing it;
- `names()` (sorted) and `name in registry`, which never resolve anything;
- `lookup(name)` (also `registry[name]`): the entry, or `UnknownName` whose message is the one
  line of config.names: `unknown loss 'grop'; did you mean 'grpo'? known: dr_grpo, grpo, ...`;
- `register(name)` as a decorator or `register(name, obj)` as a call; a table given to the
  constructor is the other way to add entries (one line each).
With `unique=True` a name registers once (a lazy entry is replaced by the object it names).
`resolve_ref` turns one `"module:attr"` string into its object.
Does not cover: what the entries are or how they are used. Lives in config/ because config
sections validate names against registries, and config/ imports nothing outside itself; torch-free.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar, overload

from tritonforge.config.names import unknown_name

__all__ = ["Registry", "UnknownName", "resolve_ref"]

T = TypeVar("T")


class UnknownName(KeyError, ValueError):
    """A name no registry entry has; str() is the one-line message (a KeyError and a ValueError,
    as the registries raised one or the other before they shared this helper)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def resolve_ref(ref: str) -> Any:
    """The object a `"module:attr.sub"` string names (the module imported first)."""
    module_name, _, attr_path = ref.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split(".") if attr_path else ():
        obj = getattr(obj, part)
    return obj


class Registry(Mapping[str, T], Generic[T]):
    """Name -> entry; see the module docstring. `kind` names the entries in messages."""

    def __init__(
        self, kind: str, entries: Mapping[str, T | str] | None = None, *, unique: bool = False
    ) -> None:
        self.kind = kind
        self.unique = unique
        self._entries: dict[str, T | str] = dict(entries or {})

    # ---------------------------------------------------------------- names (never resolve)
    def names(self) -> list[str]:
        """Every registered name, sorted; nothing is imported."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"

    def is_lazy(self, name: str) -> bool:
        """The entry of `name` is still a reference (not imported yet)."""
        return isinstance(self._entries.get(name), str)

    # ---------------------------------------------------------------- lookup
    def unknown(self, name: str) -> UnknownName:
        """The error for `name` (not raised): `unknown KIND 'name'; did you mean ...`."""
        return UnknownName(unknown_name(self.kind, str(name), self._entries))

    def lookup(self, name: str) -> T:
        """The entry of `name` (a lazy one resolved and kept); UnknownName if none."""
        if name not in self._entries:
            raise self.unknown(name)
        entry = self._entries[name]
        if not isinstance(entry, str):
            return entry
        if ":" in entry:
            obj = resolve_ref(entry)
        else:  # importing the module registers the entry
            importlib.import_module(entry)
            obj = self._entries[name]
            if isinstance(obj, str):
                raise ImportError(f"module {entry} did not register {self.kind} {name!r}")
        self._entries[name] = obj
        return obj  # type: ignore[return-value]

    def __getitem__(self, name: str) -> T:
        return self.lookup(name)

    # ---------------------------------------------------------------- registration
    @overload
    def register(self, name: str) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, obj: T | str) -> T | str: ...

    def register(self, name: str, obj: Any = None) -> Any:
        """`@registry.register("name")` above a definition, or `registry.register("name", obj)`;
        `obj` may be a lazy reference string. Returns the object (the decorator: unchanged)."""
        if obj is None:

            def deco(fn: T) -> T:
                self._add(name, fn)
                return fn

            return deco
        self._add(name, obj)
        return obj

    def _add(self, name: str, obj: T | str) -> None:
        if self.unique and name in self._entries and not self.is_lazy(name):
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = obj
