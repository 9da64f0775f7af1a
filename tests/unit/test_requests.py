"""The judge's requests as records (judge/requests.py): one per op the worker serves, and the
wire form of each is the dict the worker reads.

Covers: the ops of the records are exactly the ops of `Worker.loop` (but `exit`, which the judge
never sends a worker), optional fields left out of the wire form as before (a request to the
worker keeps the keys it always had), the replayer's recipe encoded from its parsed record, and
that no judge module builds a request dict (`"op":` appears only in requests.py and the fork
server's handle). Does not cover: what the worker does with them (sandbox tests).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import tritonforge.evaluation.judge as judge_pkg
from tritonforge.evaluation.judge import requests as rq
from tritonforge.evaluation.sandbox import worker
from tritonforge.evaluation.sandbox.recipe_format import encode_recipe, parse_recipe

DESC = {"size": 8, "tensors": [], "tree": {"t": "list", "v": []}}


def _worker_ops() -> set[str]:
    loop = ast.parse(inspect.getsource(worker.Worker.loop).strip().replace("\n    ", "\n"))
    table = next(
        n.value
        for n in ast.walk(loop)
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "ops"
    )
    assert isinstance(table, ast.Dict)
    return {k.value for k in table.keys if isinstance(k, ast.Constant)}


def _records() -> list[type]:
    return [
        c
        for c in vars(rq).values()
        if inspect.isclass(c)
        and dataclasses.is_dataclass(c)
        and isinstance(c.__dict__.get("op"), str)
    ]


def test_every_worker_op_has_one_frozen_record() -> None:
    ops = _worker_ops()
    assert {"load", "run", "time", "ref_load", "ref_drop", "replay_load"} <= ops
    records = _records()
    assert {c.op for c in records} == ops
    for c in records:
        assert c.__dataclass_params__.frozen, c  # type: ignore[attr-defined]
    assert [c.op for c in records].count("time") == 2  # a candidate's and a reference's


def test_the_wire_forms_keep_the_keys_the_worker_reads() -> None:
    memfd = rq.Carry(DESC, shared_out=False)
    assert memfd.wire() == {"inputs": DESC}
    shared = rq.Carry(DESC, shared=True, shared_out=True)
    assert shared.wire() == {"inputs": DESC, "shared": True, "shared_out": True}
    run = rq.Run(memfd, profile=True, snapshot=True, repeat=False)
    assert run.wire() == {"op": "run", "inputs": DESC, "profile": True, "snapshot": True,
                          "repeat": False}  # fmt: skip
    assert rq.Run(shared, True, True, True, recipe=True).wire()["recipe"] is True
    timed = rq.Time(memfd, 2, 5, 250.0, "cuda_events")
    assert timed.wire() == {"op": "time", "inputs": DESC, "warmup": 2, "trials": 5,
                            "budget_ms": 250.0, "clock": "cuda_events"}  # fmt: skip
    tol = rq.Time(memfd, 1, 1, 0.0, "host", (("float32", 1e-4), ("float16", 1e-2)))
    assert tol.wire()["consistency"] == {"tol": {"float32": 1e-4, "float16": 1e-2}}
    load = rq.Load("src", DESC, 7, "cpu", "triton", "strict", ("a",))
    assert load.wire() == {"op": "load", "source": "src", "init_inputs": DESC, "init_seed": 7,
                           "device": "cpu", "backend": "triton", "mode": "strict",
                           "preimport": ["a"]}  # fmt: skip
    offered = rq.Load("src", DESC, 7, "cuda:0", "triton", "strict",
                      shared=rq.SharedOffer(1, 2, 3, 4))  # fmt: skip
    assert offered.wire()["shared"] == {"in": 1, "in_size": 2, "out": 3, "out_size": 4}
    assert rq.RefDrop("k").wire() == {"op": "ref_drop", "key": "k"}
    assert rq.RefDrop("k", inputs_only=True).wire()["inputs_only"] is True
    assert rq.ReplayTrace(memfd, 0xA5).wire() == {"op": "replay_trace", "inputs": DESC,
                                                  "poison": 0xA5}  # fmt: skip


def test_the_replayer_gets_the_parsed_recipe_encoded() -> None:
    view = ["in", 0, 0, "float32", [4], [1]]
    raw = {"inputs": 1, "storages": [], "blob": 0, "outputs": {"t": ["st", *view[1:]]},
           "steps": [{"op": "aten::relu.default", "args": [{"t": view}], "kwargs": {},
                      "out": {"t": ["st", *view[1:]], "new": 16}}]}  # fmt: skip
    req = rq.ReplayLoad("cpu", "module", parse_recipe(raw), {"size": 0})
    wire = req.wire()
    assert wire["recipe"] == raw == encode_recipe(parse_recipe(raw))
    assert wire["op"] == "replay_load" and wire["blob"] == {"size": 0} and "shared" not in wire


def test_no_judge_module_builds_a_request_dict() -> None:
    folder = Path(judge_pkg.__file__).parent
    found = [p.name for p in sorted(folder.glob("*.py")) if '"op":' in p.read_text()]
    assert found == ["forkserver.py", "requests.py"], found
