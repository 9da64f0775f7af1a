"""`tritonforge problems check` reports degenerate problems, measured (judge/degenerate.py).

Covers: on a KernelBench layout with KernelBench L2/23 (Conv3d, GroupNorm, mean: the output does
not depend on the input) and L1/1 (a matmul) at CPU sizes, one line per problem, the degenerate
one with its id, the word `degenerate` and the measured reason, the others `ok`, the summary
counting it; `--json` carries the per-output and per-input findings; `--quick` runs no reference.
Does not cover: the measurement itself (tests/unit/test_degenerate.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from tritonforge.cli import main

REFS = Path(__file__).resolve().parents[1] / "eval" / "corpus" / "field_exploits" / "references"


def _layout(tmp_path: Path) -> Path:
    for level, name, ref in (
        (1, "1_Square_matrix_multiplication_", "kb_l1_001_matmul_cpu"),
        (2, "23_Conv3d_GroupNorm_Mean", "kb_l2_023_conv3d_gn_mean_cpu"),
    ):
        d = tmp_path / f"level{level}"
        d.mkdir(exist_ok=True)
        (d / f"{name}.py").write_text((REFS / f"{ref}.py").read_text())
    return tmp_path


def test_check_reports_the_degenerate_problem(tmp_path: Path, capsys) -> None:
    src = str(_layout(tmp_path))
    assert main(["problems", "check", "--suite", "kernelbench", "--source", src]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "kernelbench/L1/1_Square_matrix_multiplication_: ok"
    head, _, reason = lines[1].partition(": degenerate: ")
    assert head == "kernelbench/L2/23_Conv3d_GroupNorm_Mean", lines[1]
    assert reason.startswith("output 0 does not depend on the inputs"), lines[1]
    assert lines[-1] == "2/2 problem(s) can be judged on cpu; 1 degenerate"
    argv = ["problems", "check", "--suite", "kernelbench", "--source", src, "--level", "2"]
    assert main([*argv, "--json"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[0])
    assert row["degenerate"] and row["constant_outputs"] == [0] and row["unused_inputs"] == []
    assert main([*argv, "--quick"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [
        "kernelbench/L2/23_Conv3d_GroupNorm_Mean: ok",
        "1/1 problem(s) can be judged on cpu",
    ]
