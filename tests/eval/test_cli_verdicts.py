"""Only verdicts exit 0: eval-kernel and eval-dir judging real files through the command line.

Covers: `eval-kernel --json` on a built-in problem at its cpu size (exit 0, the verdict as the one
and only stdout line, the phases in progress on stderr with their elapsed time, no size warning),
a failing candidate still exiting 0 with its verdict, and `eval-dir` on a folder holding one
matching file and one stray file (exit 0, a summary, the stray file named on stderr).
Runs the evaluator on the CPU interpreter (tens of seconds).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tritonforge.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _relu_files(tmp_path: Path) -> tuple[Path, Path]:
    from tritonforge.problems import load_suite, select

    relu = select(load_suite("builtin", size="cpu"), ids=["relu"])[0]
    ref, cand = tmp_path / "relu_cpu.py", tmp_path / "relu_triton.py"
    ref.write_text(relu.reference_src)
    cand.write_text(relu.solution_src or "")
    return ref, cand


def test_eval_kernel_prints_the_verdict_and_shows_phases_on_stderr(tmp_path: Path) -> None:
    ref, cand = _relu_files(tmp_path)
    proc = run("eval-kernel", str(ref), str(cand), "--device", "cpu", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    verdict = json.loads(lines[0])
    assert verdict["status"] == "correct" and verdict["device"] == "cpu"
    err = proc.stderr
    for phase in (
        "reference:",
        "spawn:",
        "import:",
        "compile: trial 1/5",
        "correctness: trial 5/5",
    ):
        assert phase in err, err
    assert "warning:" not in err  # cpu size: nothing to warn about
    assert "s] compile" in err  # each progress line carries the elapsed seconds


def test_a_failing_candidate_is_still_a_verdict(tmp_path: Path) -> None:
    ref, _ = _relu_files(tmp_path)
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n")
    proc = run("eval-kernel", str(ref), str(bad), "--json", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["status"] == "syntax_error"
    assert proc.stderr == ""  # --quiet: no progress


def test_eval_dir_judges_matching_files_and_names_the_rest(tmp_path: Path) -> None:
    _, cand = _relu_files(tmp_path)
    folder = tmp_path / "cands"
    folder.mkdir()
    (folder / "relu.py").write_text(cand.read_text())
    (folder / "notes.py").write_text("x = 1\n")
    proc = run(
        "eval-dir", str(folder), "--workers", "1", "--set", "correctness_trials=2", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert summary["correct"] == 1 and summary["problems"] == 43
    assert "notes.py matches no problem" in proc.stderr
    assert (folder / "eval" / "summary.json").is_file()
