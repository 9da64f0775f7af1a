"""benchmarks/field_honest.py and benchmarks/parallel_cli.py in their CPU mode (small: 2-3 cases of
the honest field corpus at CPU sizes, Triton interpreter, a real `serve-eval` and real concurrent
`eval-kernel` processes): both run end to end and write the JSON fields the issue names.

Covers: field_honest.json has per case and preset our status, rule, speedup and the source's
verdict, and top-level honest_total, honest_accepted, real_bugs (a list), http_errors (0); the
statuses match the manifest's CPU expectations; parallel_cli.json has status_agreement (1.0 on
these cases) and speedup_median_abs_log_ratio (null on the CPU: nothing is timed). The CPU
figures are a check of the scripts, not results (the GPU ones go to docs/bench/h200_*.json).
Skips without the shared KernelBench data. Does not cover: GPU figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import helpers.field_honest as fh

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not fh.data_available(), reason="no KernelBench data"),
]
BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _run(script: str, out: Path, *args: str) -> dict:
    cmd = [sys.executable, str(BENCH / script), "--device", "cpu", "--workers", "2",
           "--trials", "2", "--out", str(out), *args]  # fmt: skip
    subprocess.run(cmd, check=True, timeout=1200)
    return json.loads(out.read_text())


def test_field_honest_cpu_mode(tmp_path: Path) -> None:
    doc = _run("field_honest.py", tmp_path / "field.json", "--cases", "3")
    assert {"honest_total", "honest_accepted", "real_bugs", "http_errors"} <= set(doc)
    assert doc["http_errors"] == 0 and isinstance(doc["real_bugs"], list)
    cases = {c["file"]: c for c in fh.cases()}
    assert len(doc["rows"]) == 3 * len(fh.PRESETS)
    for row in doc["rows"]:
        assert {"case", "preset", "status", "rule", "speedup", "source_verdict"} <= set(row)
        expected = fh.expected(cases[row["case"]], row["preset"], "cpu")
        assert (row["status"], row["rule"]) == expected, row
    assert doc["honest_accepted"] == doc["honest_total"] >= 1


def test_parallel_cli_cpu_mode(tmp_path: Path) -> None:
    doc = _run("parallel_cli.py", tmp_path / "parallel.json", "--cases", "2", "--procs", "2")
    assert doc["cases"] == 2 and doc["status_agreement"] == 1.0
    assert "speedup_median_abs_log_ratio" in doc and doc["speedup_median_abs_log_ratio"] is None
    for row in doc["rows"]:
        assert row["cli_status"] == row["service_status"] is not None, row
