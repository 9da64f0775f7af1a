"""Bad input from the problem side: each gets one clear verdict, and the service keeps serving.

Covers: a reference that fails to load, to build, or on its own inputs; one that imports a
library that is not installed; one too big for this machine (sized on the meta device, before
anything is allocated: the message names the bytes needed and usable); a reason recorded by the
loader (`meta["cannot_run"]`); through the HTTP service, each of these answered with
`internal_error` in phase `reference` (which does not count against the device), then a good
request answered `correct`, and the verdict records the request's preset; eval-kernel and
eval-dir record the preset too.
Does not cover: references that hang (the judge computes references in its own threads and
has no budget for them).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tritonforge.cli import main
from tritonforge.config.eval import EvalSettings
from tritonforge.config.server import ServerConfig
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.evaluation.judge.problem_check import footprint
from tritonforge.evaluation.judge.reference import load_module
from tritonforge.evaluation.service.server import create_app
from tritonforge.evaluation.service.service import EvalService
from tritonforge.problems import load_suite
from tritonforge.types import Problem, Status

RELU = next(p for p in load_suite("builtin", size="cpu") if p.name == "relu")
GOOD = RELU.reference_src
BAD = {
    "load": (GOOD + "\nraise ValueError('broken at import')\n", "failed to load", False),
    "build": (
        GOOD.replace("super().__init__()", "super().__init__()\n        1 / 0"),
        "failed to build",
        False,
    ),
    "forward": (
        GOOD.replace("return torch.relu(x)", "return x @ torch.ones(3, 3)"),
        "failed on its own inputs",
        False,
    ),
    "library": ("import not_a_real_module_xyz\n" + GOOD, "not_a_real_module_xyz", True),
    "too_big": (
        GOOD.replace(
            "def get_inputs():",
            "def get_inputs():\n    return [torch.randn(2**20, 2**20)]\n\n\ndef _unused():",
        ),
        "does not fit: needs about",
        True,
    ),
}


def _problem(name: str, src: str, **meta: Any) -> Problem:
    return Problem(id=f"bad/{name}", suite="bad", name=name, reference_src=src, meta=meta)


@pytest.fixture(scope="module")
def evaluator():
    ev = Evaluator(EvalSettings(device="cpu", correctness_trials=2))
    yield ev
    ev.close()


@pytest.mark.parametrize("name", sorted(BAD))
def test_one_clear_verdict(evaluator: Evaluator, name: str) -> None:
    src, words, unrunnable = BAD[name]
    v = evaluator.evaluate(_problem(name, src), RELU.solution_src)
    assert v.status is Status.INTERNAL_ERROR and v.phase == "reference", v
    assert words in v.message, v.message
    head = "cannot be judged here" if unrunnable else "has a broken reference"
    assert v.message.startswith(f"the problem {head}: "), v.message
    assert v.problem_id == f"bad/{name}"


def test_loader_reason_and_footprint() -> None:
    ev = Evaluator(EvalSettings(device="cpu"))
    try:
        p = _problem("hub", GOOD, cannot_run="no offline config for Hugging Face model 'x/y'")
        v = ev.evaluate(p, RELU.solution_src)
        assert v.status is Status.INTERNAL_ERROR and "no offline config" in v.message
    finally:
        ev.close()
    mod = load_module(BAD["too_big"][0], "too_big")
    fp = footprint(mod, [])
    assert fp is not None and fp.inputs == 4 * 2**40 and fp.outputs == 4 * 2**40
    assert footprint(load_module(GOOD, "good"), []).inputs == 4 * _relu_numel()


def _relu_numel() -> int:
    mod = load_module(GOOD, "relu")
    return sum(t.numel() for t in mod.get_inputs())


def test_service_keeps_serving_after_bad_problems(evaluator: Evaluator) -> None:
    config = ServerConfig(device="cpu", workers=2, allow_inline_problems=True)
    with TestClient(create_app(config, EvalService(config, evaluator=evaluator))) as api:
        for name, (src, words, _) in sorted(BAD.items()):
            body = {
                "problem": _problem(name, src).model_dump(mode="json"),
                "source": RELU.solution_src,
            }
            r = api.post("/v1/eval", json=body)
            assert r.status_code == 200, r.text
            v = r.json()
            assert v["status"] == "internal_error" and v["phase"] == "reference", v
            assert words in v["message"]
        good = {
            "suite": "builtin",
            "problem_id": "relu",
            "source": RELU.solution_src,
            "preset": "kernelbench",
        }
        r = api.post("/v1/eval", json=good)
        assert r.status_code == 200 and r.json()["status"] == "correct", r.text
        assert r.json()["preset"] == "kernelbench" and r.json()["mode"] == "hybrid"
        bad_preset = api.post("/v1/eval", json={**good, "preset": "nope"})
        assert bad_preset.status_code == 422 and "preset" in bad_preset.text
        health = api.get("/v1/devices").json()
        assert all(not d.get("quarantined") for d in health.get("devices", health)), health


def test_cli_records_the_preset(tmp_path, capsys) -> None:
    ref, cand = tmp_path / "ref.py", tmp_path / "cand.py"
    ref.write_text(GOOD)
    cand.write_text(RELU.solution_src or "")
    argv = ["eval-kernel", str(ref), str(cand), "--device", "cpu", "--trials", "1", "--json"]
    assert main([*argv, "--preset", "tritonforge"]) == 0
    v = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert v["preset"] == "tritonforge" and v["status"] == "correct" and v["mode"] == "hybrid"
    assert any("correctness_trials" in n for n in v["notes"])  # --trials changed the preset
    folder = tmp_path / "cands"
    folder.mkdir()
    (folder / "relu.py").write_text(RELU.solution_src or "")
    out = tmp_path / "out"
    assert main(["eval-dir", str(folder), "--size", "cpu", "--device", "cpu", "--trials", "1",
                 "--preset", "kernelbench", "--out", str(out)]) == 0  # fmt: skip
    rows = [json.loads(x) for x in (out / "verdicts.jsonl").read_text().splitlines()]
    assert [r["preset"] for r in rows] == ["kernelbench"]
