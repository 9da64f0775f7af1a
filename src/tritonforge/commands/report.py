"""`tritonforge report RUN_DIR`: write RUN_DIR/report.html (curves, before/after, trajectories)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="HTML report of a training run", description=__doc__)
    p.add_argument("run_dir", type=Path)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tritonforge.jobs.report import write_report

    if not args.run_dir.is_dir():
        print(f"tritonforge report: {args.run_dir} is not a directory", file=sys.stderr)
        return 2
    print(write_report(args.run_dir))
    return 0
