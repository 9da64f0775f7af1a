"""FSDP2 on 2 CPU processes (gloo, torchrun) computes the same update as one process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).resolve().parents[1] / "helpers" / "fsdp_worker.py"
REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["rl", "rl_gspo", "sft"])
def test_two_processes_match_one(tmp_path: Path, mode: str) -> None:
    one, two = tmp_path / "one" / "p.pt", tmp_path / "two" / "p.pt"
    one.parent.mkdir()
    two.parent.mkdir()
    _run([sys.executable, str(WORKER), mode, str(one)], tmp_path)
    torchrun = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
    ]  # fmt: skip
    _run([*torchrun, str(WORKER), mode, str(two)], tmp_path)

    r1 = json.loads(Path(str(one) + ".json").read_text())
    r2 = json.loads(Path(str(two) + ".json").read_text())
    assert (r1["world"], r2["world"]) == (1, 2)
    assert r2["losses"] == pytest.approx(r1["losses"], rel=1e-5, abs=1e-6)
    p1, p2 = torch.load(one), torch.load(two)
    assert p1.keys() == p2.keys()
    from helpers.fsdp_worker import tiny_model

    init = tiny_model().state_dict()
    moved = max((p1[k] - init[k].float()).abs().max().item() for k in p1)
    worst = max((p1[k] - p2[k]).abs().max().item() for k in p1)
    assert moved > 1e-3  # the steps really changed the parameters
    assert worst < 1e-5
    if mode.startswith("rl"):  # weights and checkpoint written under FSDP (rank 0 gathered)
        run = two.parent / "run"
        assert (run / "weights" / "v2" / "config.json").is_file()
        assert (run / "checkpoints" / "step_00000002" / "state.pt").is_file()
        assert (run / "checkpoints" / "step_00000002" / "rng_rank1.pt").is_file()
