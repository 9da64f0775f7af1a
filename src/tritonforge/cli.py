"""The `tritonforge` command: one subcommand per job, each in `tritonforge.commands.<name>`.

Covers: argument parsing, logging set-up, dispatch, `--print-config`, and the exit-code contract:
0 for a finished job (a verdict, also of a failing candidate, is a finished job), 2 for any request
that cannot be served as asked (bad arguments, unknown names, missing files or models, a device
this machine lacks), told in one line on stderr (with `--json` also as one JSON object on
stdout),
130 when interrupted. Does not cover: the jobs themselves. A new command is a module exposing
`register(subparsers)` and one line in COMMANDS; a command with a config also sets `config_fn`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from tritonforge import __version__
from tritonforge.config import ConfigError, config_json
from tritonforge.config.names import suggest
from tritonforge.config.registry import Registry
from tritonforge.logging_setup import setup_logging

# command -> its module's `register(subparsers)`; the order is the order of `tritonforge --help`.
COMMANDS: Registry[Callable[[Any], None]] = Registry(
    "command",
    {
        name: f"tritonforge.commands.{name.replace('-', '_')}:register"
        for name in (
            "problems", "eval-kernel", "eval-dir", "serve-eval", "make-tiny-model", "rollout",
            "bench-model", "sft", "train", "compare", "report", "demo",
        )
    },
)  # fmt: skip
USAGE_ERROR = 2
_JSON_ERRORS = {"on": False}  # set by main() when --json is on the command line


def emit_error(prog: str, message: str, as_json: bool | None = None) -> None:
    """Tell the user, in one line on stderr, why a request was refused; with --json also as one
    JSON object on stdout (where scripts read the last line)."""
    text = " ".join(str(message).split())
    if as_json if as_json is not None else _JSON_ERRORS["on"]:
        print(json.dumps({"error": text, "command": prog, "exit_code": USAGE_ERROR}))
    print(f"{prog}: error: {text}", file=sys.stderr)


def _hint(message: str, parser: argparse.ArgumentParser) -> str:
    """`did you mean` for argparse's invalid choices and unrecognized options."""
    m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if m:
        close = suggest(m.group(1), re.findall(r"'([^']*)'", m.group(2)) or m.group(2).split(", "))
        return f"{message}; did you mean {close[0]!r}?" if close else message
    m = re.search(r"unrecognized arguments: (\S+)", message)
    if m and m.group(1).startswith("-"):
        flag = m.group(1).split("=")[0]
        close = suggest(flag, [o for o in parser._option_string_actions if o.startswith("--")])
        return f"{message}; did you mean {close[0]}?" if close else message
    return message


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (and a "did you mean"); `--help` keeps argparse's usage."""

    def error(self, message: str) -> NoReturn:
        emit_error(self.prog, f"{_hint(message, self)} (see {self.prog} --help)")
        self.exit(USAGE_ERROR)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tritonforge", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"tritonforge {__version__}")
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument("--log-json", action="store_true", help="log as JSON lines on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name in COMMANDS:
        COMMANDS.lookup(name)(sub)
    return parser


def _deepest(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)parser of the (sub)command `args` chose, e.g. `problems list`'s."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                return _deepest(chosen, args)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _JSON_ERRORS["on"] = "--json" in argv
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # told by the command's own parser, which knows its options
            _deepest(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # --help, --version, --list-keys, or a usage error already told
        return exc.code if isinstance(exc.code, int) else USAGE_ERROR
    setup_logging(args.log_level, args.log_json)
    if not getattr(args, "func", None):
        parser.print_help()
        return USAGE_ERROR
    prog = f"tritonforge {args.command}"
    try:
        if getattr(args, "print_config", False):
            print(config_json(args.config_fn(args)))
            return 0
        return int(args.func(args) or 0)
    except ConfigError as exc:  # includes plan.PlanError: the request cannot be served as asked
        emit_error(prog, str(exc))
        return USAGE_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
