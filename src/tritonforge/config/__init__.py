"""Typed configuration: pydantic models, TOML files and dotted command-line overrides.

Covers: loading a TOML file into a config model, applying `a.b.c=value` overrides (values parsed
as TOML literals, falling back to strings), rejecting unknown keys, saving the resolved config.
Does not cover: the config models themselves (one module per command) or any torch import.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "ConfigError",
    "Section",
    "load_config",
    "parse_override",
    "save_config",
    "with_overrides",
]

T = TypeVar("T", bound=BaseModel)


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, assignment is validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ConfigError(ValueError):
    """A config file or override that cannot be applied; the message says which key and why."""


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split `a.b.c=value` into (["a","b","c"], parsed value)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key.path=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r} has an empty key part")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.split("."), value


def _set_path(tree: dict[str, Any], path: list[str], value: Any) -> None:
    node = tree
    for part in path[:-1]:
        nxt = node.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"cannot set {'.'.join(path)}: {part} is not a section")
        node = nxt
    node[path[-1]] = value


def _merge(into: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v
    return into


def load_config(
    model: type[T],
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    base: T | None = None,
) -> T:
    """Build `model` from an optional TOML file plus overrides; raise ConfigError with the key.

    With `base`, the file and overrides apply on top of that instance (so a command's tuned
    defaults survive a partial override of a nested section)."""
    tree: dict[str, Any] = base.model_dump(mode="json") if base is not None else {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist")
        try:
            tree = _merge(tree, tomllib.loads(p.read_text()))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p}: invalid TOML: {exc}") from exc
    for item in overrides or []:
        keys, value = parse_override(item)
        _set_path(tree, keys, value)
    try:
        return model.model_validate(tree)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "<root>"
            lines.append(f"  {loc}: {err['msg']}")
        raise ConfigError(f"invalid {model.__name__} config:\n" + "\n".join(lines)) from None


def save_config(config: BaseModel, path: str | Path) -> Path:
    """Write the resolved config as JSON (exact, round-trippable) next to a run's outputs."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(config.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")
    return p


def with_overrides(config: T, overrides: list[str]) -> T:
    """A copy of `config` with dotted `key=value` overrides applied and validated."""
    tree = config.model_dump(mode="json")
    for item in overrides:
        keys, value = parse_override(item)
        _set_path(tree, keys, value)
    try:
        return type(config).model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(f"invalid overrides {overrides}: {exc}") from None
