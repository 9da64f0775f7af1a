"""Typed configuration: pydantic models, TOML files and dotted command-line overrides.

Covers: loading a TOML file into a config model, applying `a.b.c=value` overrides (values parsed
as TOML literals, falling back to strings), rejecting unknown keys with a one-line message that
suggests the closest known key or value, listing every key of a model (`config_keys`), saving
the resolved config; sections that are a union of classes chosen by `type` (config.engine): keys
of another class refused with the types that have them, and a layer (base, file, override) that
changes the `type` drops the keys earlier layers gave that the new class lacks. Does not cover:
the config models themselves (one module per section family). The whole `config` package
imports nothing from the rest of tritonforge and no torch.
"""

from __future__ import annotations

import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, Tag, ValidationError
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
            layer = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p}: invalid TOML: {exc}") from exc
        tree = _merge(_retype(model, tree, layer), layer)
    _apply_overrides(model, tree, overrides or [])
    try:
        return model.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(f"invalid {model.__name__}: {describe_errors(model, exc)}") from None


def _apply_overrides(model: type[BaseModel], tree: dict[str, Any], overrides: list[str]) -> None:
    for item in overrides:
        keys, value = parse_override(item)
        layer: dict[str, Any] = {keys[-1]: value}
        for part in reversed(keys[:-1]):
            layer = {part: layer}
        _retype(model, tree, layer)
        _set_path(tree, keys, value)


def _retype(model: type[BaseModel], tree: dict[str, Any], layer: dict[str, Any]) -> dict[str, Any]:
    """Where `layer` changes the `type` of a union section, drop from `tree` (the earlier
    layers) the keys of that section the new class does not have. Returns `tree`."""
    for name, value in layer.items():
        field = model.model_fields.get(name)
        old = tree.get(name)
        if field is None or not isinstance(value, dict) or not isinstance(old, dict):
            continue
        section = _section_of(field.annotation)
        variants = _tagged(field.annotation)
        if variants and "type" in value:
            section = variants.get(str(value["type"]))
            was = old.get(
                "type", getattr(field.get_default(call_default_factory=True), "type", None)
            )
            if section is not None and value["type"] != was:
                tree[name] = old = {k: v for k, v in old.items() if k in section.model_fields}
        elif variants:
            section = variants.get(str(old.get("type")))
        if section is not None:
            _retype(section, old, value)
    return tree


def describe_errors(model: type[BaseModel], exc: ValidationError) -> str:
    """The validation errors on one line (`key: why; key: why`), with "did you mean" hints."""
    parts = []
    for err in exc.errors():
        raw = [str(x) for x in err["loc"]]
        loc, _, _ = _walk(model, raw)
        text = f"{'.'.join(loc) or '<root>'}: {err['msg']}"
        if err["type"] == "extra_forbidden" and loc:
            text = _unknown_key(model, raw)
        elif err["type"] == "union_tag_invalid":
            allowed = re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected_tags", "")))
            tag = str((err.get("ctx") or {}).get("tag", ""))
            text = f"{'.'.join([*loc, 'type'])}: Input should be {_either(allowed)}"
            close = suggest(tag, allowed)
            if close:
                text += f"; did you mean {close[0]!r}?"
        elif err["type"] == "literal_error":
            allowed = re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected", "")))
            close = suggest(str(err.get("input")), allowed)
            if close:
                text += f"; did you mean {close[0]!r}?"
        parts.append(text)
    return "; ".join(parts)


def _unknown_key(model: type[BaseModel], raw: list[str]) -> str:
    """`unknown key a.b; did you mean ...?`, and for a union section the types that have it."""
    loc, section, _ = _walk(model, raw[:-1])
    text = f"unknown key {'.'.join([*loc, raw[-1]])}"
    close = suggest(raw[-1], list(section.model_fields) if section is not None else [])
    if close:
        text += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    _, _, variants = _walk(model, raw[:-2]) if len(raw) >= 2 else ([], None, {})
    tag = raw[-2] if len(raw) >= 2 else ""
    owners = [t for t, cls in variants.items() if raw[-1] in cls.model_fields]
    if tag in variants and owners:  # a key of another kind of this section
        where = ".".join([*loc, "type"])
        text += f" ({where} {tag!r} has no such key; {where} {_either(owners)} has it)"
    return text


def _either(names: list[str]) -> str:
    """'a', 'b' or 'c'."""
    quoted = [repr(n) for n in names]
    return " or ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)


def _tagged(annotation: Any) -> dict[str, type[BaseModel]]:
    """The classes of a union chosen by tag (`Union[Annotated[X, Tag("x")], ...]`), by tag;
    {} for any other annotation."""
    out: dict[str, type[BaseModel]] = {}
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if typing.get_origin(arg) is typing.Annotated:
                cls, *meta = typing.get_args(arg)
                tags = [m.tag for m in meta if isinstance(m, Tag)]
                if tags and isinstance(cls, type) and issubclass(cls, BaseModel):
                    out[tags[0]] = cls
    return out


def _walk(
    model: type[BaseModel], raw: list[str]
) -> tuple[list[str], type[BaseModel] | None, dict[str, type[BaseModel]]]:
    """Follow an error location from `model`: (the location without union tags, the section
    class it ends at or None, the classes by tag when it ends at a union field)."""
    keys: list[str] = []
    current: type[BaseModel] | None = model
    variants: dict[str, type[BaseModel]] = {}
    i = 0
    while i < len(raw):
        keys.append(raw[i])
        field = current.model_fields.get(raw[i]) if current is not None else None
        variants = _tagged(field.annotation) if field is not None else {}
        if variants and i + 1 < len(raw) and raw[i + 1] in variants:
            current, i = variants[raw[i + 1]], i + 2
            variants = {}
            continue
        current = _section_of(field.annotation) if field is not None else None
        i += 1
    return keys, current, variants


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

    With `instance`, the defaults shown are that instance's values (a command's tuned defaults).
    A union section lists the keys of its class (the instance's, else the default's), then the
    other classes' own keys, their descriptions starting with the types that have them."""
    out: list[ConfigKey] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        value = getattr(instance, name) if instance is not None else PydanticUndefined
        if _tagged(field.annotation):
            out.extend(_union_keys(field, value, key + "."))
            continue
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


def _union_keys(field: Any, value: Any, prefix: str) -> list[ConfigKey]:
    chosen = value if isinstance(value, BaseModel) else field.get_default(call_default_factory=True)
    tags = _tagged(field.annotation)
    out = [
        k._replace(
            type=" | ".join(map(repr, tags)),
            description="which kind; keys marked [type ...] below belong to other kinds",
        )
        if k.key == f"{prefix}type"
        else k
        for k in config_keys(type(chosen), chosen, prefix)
    ]
    owners: dict[str, list[str]] = {}
    others: dict[str, ConfigKey] = {}
    for tag, cls in tags.items():
        for k in config_keys(cls, None, prefix):
            if all(k.key != o.key for o in out):
                owners.setdefault(k.key, []).append(tag)
                others.setdefault(k.key, k)
    for key, k in others.items():
        out.append(k._replace(description=f"[type {'|'.join(owners[key])}] {k.description}"))
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
    _apply_overrides(type(config), tree, overrides)
    try:
        return type(config).model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(
            f"invalid overrides {overrides}: {describe_errors(type(config), exc)}"
        ) from None
