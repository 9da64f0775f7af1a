"""Shared options of every command that takes a config: file, overrides, print, list keys.

Covers: `add_config_args` (`--config TOML`, `--set KEY=VALUE`, `--print-config`, `--list-keys`)
and `load_from_args` (file, then overrides, on top of a command's own defaults). `--print-config`
is carried out by tritonforge.cli after the command's `config_fn` resolved the config (flags
included); `--list-keys` prints at parse time and exits. Does not cover: checking names,
problems, paths or devices (tritonforge.plan) or running anything.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from tritonforge.config import config_keys, load_config

T = TypeVar("T", bound=BaseModel)

CONFIG_EPILOG = (
    "Config: a TOML file (--config) and dotted overrides (--set a.b=VALUE, values parsed as\n"
    "TOML literals); unknown keys are errors. --list-keys shows every key, --print-config the\n"
    "resolved config."
)


def _list_keys_action(model: type[BaseModel], base: Callable[[], BaseModel] | None) -> type:
    class ListKeys(argparse.Action):
        def __init__(self, option_strings: list[str], dest: str, **kw: Any) -> None:
            super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

        def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
            print_keys(model, base() if base is not None else None)
            parser.exit(0)

    return ListKeys


def print_keys(model: type[BaseModel], instance: BaseModel | None = None) -> None:
    """One line per key: `key = default  (type) description`, defaults as JSON."""
    rows = config_keys(model, instance)
    width = max((len(r.key) for r in rows), default=0)
    for r in rows:
        default = json.dumps(r.default, default=str)
        line = f"{r.key:<{width}} = {default}  ({r.type})"
        print(f"{line} {r.description}".rstrip(), file=sys.stdout)


def add_config_args(
    p: argparse.ArgumentParser,
    model: type[BaseModel],
    *,
    base: Callable[[], BaseModel] | None = None,
    flag: str = "--config",
    example: str = "--set seed=1",
) -> None:
    """Add the config options of a command whose config is `model` (defaults from `base()`)."""
    p.add_argument(
        flag, metavar="TOML", default=None, help=f"{model.__name__} as TOML (see configs/)"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override one key (repeatable), e.g. {example}",
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (file, overrides and flags) as JSON and exit",
    )
    p.add_argument(
        "--list-keys",
        action=_list_keys_action(model, base),
        help="list every config key with its default, type and description, and exit",
    )


def load_from_args(
    args: argparse.Namespace,
    model: type[T],
    base: T | None = None,
    path_attr: str = "config",
    extra: list[str] | None = None,
) -> T:
    """The config from `--config`/`--set` (plus `extra` overrides) on top of `base`."""
    return load_config(model, getattr(args, path_attr, None), [*args.set, *(extra or [])], base)
