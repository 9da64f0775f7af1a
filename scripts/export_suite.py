"""Write a suite's problems (and built-in solutions) as files: for eval-dir runs and GPU checks.

Usage: python scripts/export_suite.py OUT_DIR [--size gpu] [--suite builtin]
Writes OUT_DIR/solutions/<name>.py (candidates) and OUT_DIR/references/<name>.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tritonforge.problems import load_suite


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", default="gpu")
    ap.add_argument("--suite", default="builtin")
    args = ap.parse_args()
    (args.out / "solutions").mkdir(parents=True, exist_ok=True)
    (args.out / "references").mkdir(parents=True, exist_ok=True)
    n = 0
    for p in load_suite(args.suite, size=args.size):
        (args.out / "references" / f"{p.name}.py").write_text(p.reference_src)
        if p.solution_src:
            (args.out / "solutions" / f"{p.name}.py").write_text(p.solution_src)
            n += 1
    print(f"wrote {n} solutions to {args.out}")


if __name__ == "__main__":
    main()
