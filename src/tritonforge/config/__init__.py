"""Typed configuration: pydantic models, TOML files and dotted command-line overrides.

Covers: loading a TOML file into a config model, applying `a.b.c=value` overrides (values parsed
as TOML literals, falling back to strings), rejecting unknown keys with a one-line message that
suggests the closest known key or value, listing every key of a model (`config_keys`), saving
the resolved config. Does not cover: the config models themselves (one module per section
family). The whole `config` package imports nothing from the rest of tritonforge and no torch.
"""

from __future__ import annotations

import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticUndefined

from tritonforge.config.names import suggest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "ConfigError",
    "ConfigKey",
    "Section",
    "config_json",
    "config_keys",
    "describe_errors",
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
        raise ConfigError(f"invalid {model.__name__}: {describe_errors(model, exc)}") from None


def describe_errors(model: type[BaseModel], exc: ValidationError) -> str:
    """The validation errors on one line (`key: why; key: why`), with "did you mean" hints."""
    parts = []
    for err in exc.errors():
        loc = [str(x) for x in err["loc"]]
        text = f"{'.'.join(loc) or '<root>'}: {err['msg']}"
        if err["type"] == "extra_forbidden" and loc:
            close = suggest(loc[-1], _field_names(model, loc[:-1]))
            text = f"unknown key {'.'.join(loc)}"
            if close:
                text += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
        elif err["type"] == "literal_error":
            allowed = re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected", "")))
            close = suggest(str(err.get("input")), allowed)
            if close:
                text += f"; did you mean {close[0]!r}?"
        parts.append(text)
    return "; ".join(parts)


def _section_of(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel class inside an annotation (`X`, `X | None`), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _section_of(arg)
            if found is not None:
                return found
    return None


def _field_names(model: type[BaseModel], path: list[str]) -> list[str]:
    """Field names of the section at `path` under `model` ([] if the path is not a section)."""
    current: type[BaseModel] | None = model
    for part in path:
        field = current.model_fields.get(part) if current is not None else None
        current = _section_of(field.annotation) if field is not None else None
        if current is None:
            return []
    return list(current.model_fields) if current is not None else []


class ConfigKey(NamedTuple):
    """One settable key of a config model, as `--list-keys` shows it."""

    key: str
    type: str
    default: Any
    description: str


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    return text or str(annotation).replace("typing.", "")


def config_keys(
    model: type[BaseModel], instance: BaseModel | None = None, prefix: str = ""
) -> list[ConfigKey]:
    """Every leaf key of `model` (dotted, sections expanded) with type, default, description.

    With `instance`, the defaults shown are that instance's values (a command's tuned defaults)."""
    out: list[ConfigKey] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        value = getattr(instance, name) if instance is not None else PydanticUndefined
        section = _section_of(field.annotation)
        if section is not None:
            sub = value if isinstance(value, BaseModel) else None
            out.extend(config_keys(section, sub, key + "."))
            continue
        if value is not PydanticUndefined:
            default = value
        elif field.default is not PydanticUndefined:
            default = field.default
        elif field.default_factory is not None:
            default = field.default_factory()  # type: ignore[call-arg]
        else:
            default = None
        out.append(ConfigKey(key, _type_name(field.annotation), default, field.description or ""))
    return out


def save_config(config: BaseModel, path: str | Path) -> Path:
    """Write the resolved config as JSON (exact, round-trippable) next to a run's outputs."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(config_json(config) + "\n")
    return p


def config_json(config: BaseModel) -> str:
    """The resolved config as the JSON `save_config` writes (and `--print-config` prints)."""
    return json.dumps(config.model_dump(mode="json"), indent=2, sort_keys=True)


def with_overrides(config: T, overrides: list[str]) -> T:
    """A copy of `config` with dotted `key=value` overrides applied and validated."""
    tree = config.model_dump(mode="json")
    for item in overrides:
        keys, value = parse_override(item)
        _set_path(tree, keys, value)
    try:
        return type(config).model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(
            f"invalid overrides {overrides}: {describe_errors(type(config), exc)}"
        ) from None
