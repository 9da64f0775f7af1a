"""The trust boundary in the layout: evaluation/sandbox/ is exactly the package code loaded in the
candidate's process (fork server and worker), and nothing of the judge or the service is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import tritonforge.evaluation.sandbox as sandbox_pkg

# what the fork server imports before forking, plus what a worker imports lazily (device sharing)
PROBE = """
import json, sys
from tritonforge.evaluation.sandbox import zygote, audit, worker, isolation, devshare
print(json.dumps(sorted(m for m in sys.modules if m.startswith("tritonforge"))))
"""

OUTSIDE_ALLOWED = {"tritonforge", "tritonforge.types", "tritonforge.evaluation"}


def _loaded_in_worker() -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=300
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_sandbox_folder_is_exactly_the_candidate_side():
    loaded = _loaded_in_worker()
    folder = Path(sandbox_pkg.__file__).parent
    expected = {f"tritonforge.evaluation.sandbox.{p.stem}" for p in folder.glob("*.py")}
    expected = {m.removesuffix(".__init__") for m in expected}
    sandbox_loaded = {m for m in loaded if m.startswith("tritonforge.evaluation.sandbox")}
    assert sandbox_loaded == expected  # every module of the folder runs there
    others = loaded - sandbox_loaded
    assert others <= OUTSIDE_ALLOWED, f"judge/service code in the candidate's process: {others}"
