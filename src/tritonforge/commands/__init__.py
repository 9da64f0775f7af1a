"""CLI subcommands: each module exposes `register(subparsers)`; see tritonforge.cli."""
