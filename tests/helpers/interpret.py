"""Running a test file as a script under Triton's CPU interpreter (TRITON_INTERPRET=1 must be
set before triton is imported, so in a fresh process) and reading the JSON line it prints last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_interpreted(script: str | Path, timeout: float = 600) -> Any:
    """`python script` with TRITON_INTERPRET=1 and the script's folder and tests/ importable; its last
    stdout line as JSON (the test fails with the script's stderr if it exits non-zero)."""
    path = os.pathsep.join([str(Path(script).parent), str(Path(__file__).parents[1])])
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": path}
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
