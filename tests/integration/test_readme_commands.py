"""The README's table, run top to bottom in a fresh clone (scripts/readme_commands.sh).

Covers: every row of "What it does" as written (tiny --set overrides where a row would run for
long), including the refusals of rows that need an earlier row's output. Slow (several
minutes on a 2-core CPU); clones the committed HEAD, so uncommitted changes are not tested.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "readme_commands.sh"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs a git checkout to clone"),
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
]


@pytest.mark.timeout(3000)
def test_readme_table_runs_top_to_bottom_on_a_fresh_clone(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=2900
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    names = [s["step"] for s in steps]
    for row in ("eval_kernel", "eval_dir", "serve_eval", "sft", "rollout", "train", "compare",
                "train_ray", "report", "demo"):  # fmt: skip
        assert row in names
    assert all(s["rc"] == s["expected"] for s in steps)
    refused = {s["step"] for s in steps if s["expected"] == 2}
    assert {"rollout_before_sft", "train_before_sft", "eval_kernel_cuda"} <= refused
