"""The GPU calibration benchmarks in their CPU modes: the JSON they promise, written as they go,
and resumed (a second call redoes nothing). The GPU figures themselves come from the lead's run
(docs/benchmarks.md); here the CPU interpreter's timings mean nothing and are not checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "kernelbench"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not DATA.is_dir(), reason=f"no KernelBench data in {DATA}"),
]


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )


def test_kernelbench_self_quick_writes_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "kb.json"
    first = _run("kernelbench_self.py", "--quick", "--limit", "1", "--out", str(out))
    assert "judgements to do" in first.stderr and "expected ~" in first.stderr
    doc = json.loads(out.read_text())
    for key in ("accepted", "total", "strict_decoy_rejected", "wall_s", "candidates_per_min",
                "peak_device_gib", "rows", "exceptions", "spawn_warm_s"):  # fmt: skip
        assert key in doc, key
    assert doc["total"] == 2 and doc["accepted"] == 2, doc["exceptions"]
    assert doc["strict_decoy_total"] == 2 and doc["strict_decoy_rejected"] == 2
    assert {r["variant"] for r in doc["rows"]} == {"hybrid", "strict_decoy"}
    row = doc["rows"][0]
    assert {"status", "rule", "message", "wall", "speedup"} <= set(row)
    again = _run("kernelbench_self.py", "--quick", "--limit", "1", "--out", str(out))
    assert "0 judgements to do (4 already" in again.stderr
    assert json.loads(out.read_text())["rows"] == doc["rows"]


def test_timing_consistency_quick_fields(tmp_path: Path) -> None:
    out = tmp_path / "tc.json"
    _run("timing_consistency.py", "--quick", "--sections", "repeat,self,self_w1", "--out", str(out))
    doc = json.loads(out.read_text())
    assert doc["concurrency"] == 2
    assert doc["repeat_pairs"] == 2 and doc["repeat_median_abs_log_ratio"] is not None
    assert doc["self_n"] == 2 and doc["self_speedup_median"] is not None
    assert doc["self_speedup_p05"] <= doc["self_speedup_median"] <= doc["self_speedup_p95"]
    assert doc["workers_1"]["self_judged"] == 2  # one per level (counts round up per level)
    assert "service_throughput_ratio" in doc
    n = len(doc["rows"])
    _run("timing_consistency.py", "--quick", "--sections", "repeat,self,self_w1", "--out", str(out))
    assert len(json.loads(out.read_text())["rows"]) == n


def test_rounded_median_stays_within_its_percentiles() -> None:
    """A median rounded to 4 digits once printed above an unrounded p95 (0.9971 > 0.99707)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import statistics

    import bench_common as bc

    for xs in ([0.99704, 0.9970703070607828], [1.00005, 1.000049, 0.5], [2.0]):
        med = round(statistics.median(xs), 4)
        assert bc.percentile(xs, 0.05, 4) <= med <= bc.percentile(xs, 0.95, 4)
    assert bc.percentile([], 0.5, 4) is None


def test_retry_drops_only_the_named_rows(tmp_path: Path) -> None:
    """`--retry STATUS[@KEY_PREFIX]`: those rows of an earlier call are judged again, the rest
    kept (a resumed run re-judges what the evaluator got wrong, not the decoys)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import bench_common as bc

    path = tmp_path / "r.json"
    rows = [
        {"key": "hybrid:a", "status": "reward_hack"},
        {"key": "strict_decoy:a", "status": "reward_hack"},
        {"key": "hybrid:b", "status": "judge_fault"},
        {"key": "hybrid:c", "status": "correct"},
    ]
    path.write_text(json.dumps({"rows": rows, "sessions": []}))
    out = bc.ResultFile(path, {}, frozenset({"reward_hack@hybrid:", "judge_fault"}))
    assert out.done() == {"strict_decoy:a", "hybrid:c"} and out.doc["retried"] == 2
    again = bc.ResultFile(path, {}, frozenset())  # nothing saved yet: the file is unchanged
    assert len(again.done()) == 4 and again.doc["retried"] == 0
