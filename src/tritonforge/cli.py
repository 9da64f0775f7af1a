"""The `tritonforge` command: one subcommand per job, each in `tritonforge.commands.<name>`.

Covers: argument parsing, logging set-up, dispatch, exit codes. Does not cover: the jobs
themselves. A new command is a module exposing `register(subparsers)` listed in COMMANDS.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from tritonforge import __version__
from tritonforge.config import ConfigError
from tritonforge.logging_setup import setup_logging

# Order is the order of `tritonforge --help`.
COMMANDS = [
    "problems",
    "eval_kernel",
    "eval_dir",
    "serve_eval",
    "make_tiny_model",
    "rollout",
    "bench_model",
    "sft",
    "train",
    "compare",
    "report",
    "demo",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tritonforge", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"tritonforge {__version__}")
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument("--log-json", action="store_true", help="log as JSON lines on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"tritonforge.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"tritonforge.commands.{name}":
                continue  # command not built yet in this checkout
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level, args.log_json)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"tritonforge {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
