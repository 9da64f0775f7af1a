"""The trusted replay decides: forged recipes, kernels that cannot run alone, and the share.

Covers, through `Evaluator.evaluate` with real workers and a real replayer on the CPU
interpreter: an honest kernel's recipe replays and is accepted in both modes; a recipe the judge
receives forged (monkeypatched at `take_recipe`, the point where the candidate's word enters the
judge: everything the worker's recorder could be made to send) is rejected by the replay and
never accepted: launches removed (strict: no_kernel_launch; hybrid: replay_mismatch), the output
swapped for a constant holding the recorded call's answer (replay_mismatch), a compute op in a
strict recipe (torch_compute), a refused op (unreplayable), an unknown kernel (unreplayable),
malformed or impossible fields and views past their storage (protocol_violation), no recipe at
all (unreplayable), a strict output that a glue copy of an input made while a kernel only ran
beside it (output_not_from_kernel); hybrid mode's custom-kernel share comes from the replayed
recipe: pure PyTorch 0, the replay's PyTorch ops counted (TensorList ops too), and a required
share applied to it. Does not cover: the kernel module's refusals (unit/test_replay_kernels.py),
timing of the replay (test_timed_audit.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import helpers.hack_corpus as hc
from tritonforge.evaluation.judge import trials as trials_module
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.evaluation.judge.replay import Captured, take_recipe
from tritonforge.types import Status

pytestmark = pytest.mark.slow

RELU = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
"""

HALF_TORCH = RELU.replace(
    "        return out\n", "        return torch.sigmoid(out) * 0 + out\n"
)  # relu in a kernel, then PyTorch work whose result is the kernel's output again


@pytest.fixture(scope="module")
def strict() -> Iterator[Evaluator]:
    with Evaluator(hc.base_settings("strict")) as ev:
        yield ev


@pytest.fixture(scope="module")
def hybrid() -> Iterator[Evaluator]:
    with Evaluator(hc.base_settings("hybrid")) as ev:
        yield ev


def forged(monkeypatch: pytest.MonkeyPatch, change: Callable[[dict[str, Any]], None]) -> None:
    """Every recipe the judge receives is first changed by `change` (its JSON, in place)."""

    def take(reply: dict[str, Any], fds: list[int]) -> Captured:
        got = take_recipe(reply, fds)
        if got.raw is not None:
            got.raw = copy.deepcopy(got.raw)
            change(got.raw)
        return got

    monkeypatch.setattr(trials_module, "take_recipe", take)


def judge(ev: Evaluator, source: str, mode: str = "strict", **kw: Any):
    s = hc.base_settings(mode)
    for k, v in kw.items():
        setattr(s, k, v)
    return ev.evaluate(hc.problem("builtin/relu"), source, s)


def test_an_honest_recipe_replays_in_both_modes(strict: Evaluator, hybrid: Evaluator) -> None:
    for ev, mode in ((strict, "strict"), (hybrid, "hybrid")):
        v = judge(ev, RELU, mode)
        assert v.status is Status.CORRECT, v.message
        assert v.phase_seconds.get("replay", 0) > 0


def _drop_launches(r: dict[str, Any]) -> None:
    r["steps"] = [s for s in r["steps"] if "launch" not in s]


@pytest.mark.parametrize(
    "mode, rule", [("strict", "no_kernel_launch"), ("hybrid", "replay_mismatch")]
)
def test_a_recipe_without_its_launches_is_rejected(
    strict: Evaluator, hybrid: Evaluator, monkeypatch: pytest.MonkeyPatch, mode: str, rule: str
) -> None:
    forged(monkeypatch, _drop_launches)
    v = judge(strict if mode == "strict" else hybrid, RELU, mode)
    assert v.status is Status.REWARD_HACK and v.rule == rule, v.message


def test_a_constant_holding_the_recorded_answer_does_not_pass(
    strict: Evaluator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The output made a constant: its bytes are the recorded call's answer (the worker's copy
    of a storage it claims existed before the call), wrong for the replay's fresh inputs."""

    def as_constant(r: dict[str, Any]) -> None:
        out = r["outputs"]["t"]
        launch = next(s for s in r["steps"] if "launch" in s)
        sid = launch["args"][1]["t"][1]  # the kernel's output buffer
        r["steps"] = [s for s in r["steps"] if not (s.get("out", {}).get("t", [0, -1])[1] == sid)]
        r["steps"] = [s for s in r["steps"] if "launch" not in s] + [launch]
        size = max(e[1] for e in r["storages"]) if r["storages"] else 0
        r["storages"].append([sid, out_bytes(out), 0, 0])
        r["blob"] = max(r["blob"], out_bytes(out), size)

    forged(monkeypatch, as_constant)
    v = judge(strict, RELU)
    assert v.status is Status.REWARD_HACK, v.message
    assert v.rule in ("replay_mismatch", "protocol_violation"), v.message


def out_bytes(view: list[Any]) -> int:
    shape = view[4]
    n = 1
    for d in shape:
        n *= d
    return n * 4


def test_a_compute_op_in_a_strict_recipe_is_torch_compute(
    strict: Evaluator, monkeypatch: pytest.MonkeyPatch
) -> None:
    def add_relu(r: dict[str, Any]) -> None:
        x = {"t": ["in", 0, 0, "float32", [4], [1]]}
        new_id = 1000
        r["steps"].append({"op": "aten::relu", "args": [x], "kwargs": {},
                           "out": {"t": ["st", new_id, 0, "float32", [4], [1]], "new": 16}})  # fmt: skip

    forged(monkeypatch, add_relu)
    v = judge(strict, RELU)
    assert v.status is Status.REWARD_HACK and v.rule == "torch_compute", v.message


@pytest.mark.parametrize(
    "change, rule",
    [
        (lambda r: r.update(steps="nope"), "protocol_violation"),
        (lambda r: r.update(extra=1), "protocol_violation"),
        (lambda r: r["outputs"].update(t=["st", 999, 0, "float32", [4], [1]]), "protocol_violation"),
        (lambda r: r["outputs"]["t"].__setitem__(4, [1 << 30]), "protocol_violation"),
        (lambda r: r["outputs"]["t"].__setitem__(3, "float128"), "protocol_violation"),
        (lambda r: r["outputs"]["t"].__setitem__(2, 3), "protocol_violation"),
        (lambda r: r.update(inputs=-1), "protocol_violation"),
        (lambda r: r.update(blob=1 << 40), "protocol_violation"),
        (lambda r: [s.update(launch="other_kernel") for s in r["steps"] if "launch" in s],
         "unreplayable"),
        (lambda r: [s.update(launch="os.system") for s in r["steps"] if "launch" in s],
         "protocol_violation"),
        (lambda r: [s.update(grid=[1 << 40]) for s in r["steps"] if "launch" in s],
         "protocol_violation"),
        (lambda r: [s["kwargs"].update(BLOCK={"py": "print"}) for s in r["steps"] if "launch" in s],
         "protocol_violation"),
    ],
)  # fmt: skip
def test_malformed_or_impossible_recipes_are_rejected(
    strict: Evaluator, monkeypatch: pytest.MonkeyPatch, change: Callable, rule: str
) -> None:
    forged(monkeypatch, change)
    v = judge(strict, RELU)
    assert v.status is Status.REWARD_HACK and v.rule == rule, v.message


def test_a_refused_op_is_unreplayable(hybrid: Evaluator, monkeypatch: pytest.MonkeyPatch) -> None:
    def read_file(r: dict[str, Any]) -> None:
        r["steps"].insert(0, {"op": "aten::from_file", "args": [{"s": "/etc/passwd"}],
                              "kwargs": {}, "out": {"t": ["st", 1000, 0, "uint8", [1], [1]],
                                                    "new": 1}})  # fmt: skip

    forged(monkeypatch, read_file)
    v = judge(hybrid, RELU, "hybrid")
    assert v.status is Status.REWARD_HACK and v.rule == "unreplayable", v.message


def test_no_recipe_is_unreplayable(strict: Evaluator, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(reply: dict[str, Any], fds: list[int]) -> Captured:
        take_recipe(reply, fds).close()
        return Captured(error="the worker said no")

    monkeypatch.setattr(trials_module, "take_recipe", refuse)
    v = judge(strict, RELU)
    assert v.status is Status.REWARD_HACK and v.rule == "unreplayable", v.message
    assert "the worker said no" in v.message


GLUE_COPY = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)


class ModelNew(nn.Module):
    def forward(self, x):
        out = x.clamp(min=0).contiguous()
        touch[(1,)](out, out.numel(), BLOCK=16)
        return out
"""


def test_strict_outputs_must_be_written_by_the_replayed_kernels(
    strict: Evaluator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The candidate's own audit rejects the clamp first; with the recipe forged to show only
    glue (a copy of the input) and a kernel that writes nothing, the replay's own provenance
    rejects it (its outputs are wrong anyway on other inputs, so the forged copy is made a
    plain clone: outputs right only where the input is non-negative)."""

    def only_glue(r: dict[str, Any]) -> None:
        r["steps"] = [
            {**s, "op": "aten::clone", "args": s["args"][:1], "kwargs": {}}
            if s.get("op", "").startswith("aten::clamp")
            else s
            for s in r["steps"]
        ]

    forged(monkeypatch, only_glue)
    v = judge(strict, GLUE_COPY, correctness_trials=1)
    assert v.status is Status.REWARD_HACK, v.message
    assert v.rule in ("torch_compute", "output_not_from_kernel", "replay_mismatch"), v.message


def test_the_hybrid_share_comes_from_the_replayed_recipe(hybrid: Evaluator) -> None:
    pure = judge(hybrid, RELU.replace("relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)",
                                      "out = torch.relu(x)"), "hybrid")  # fmt: skip
    assert pure.status is Status.CORRECT and pure.audit.custom_share == 0.0, pure.message
    kernel = judge(hybrid, RELU, "hybrid")
    assert kernel.audit.custom_share == 1.0
    half = judge(hybrid, HALF_TORCH, "hybrid")
    assert half.status is Status.CORRECT, half.message
    assert 0.0 <= half.audit.custom_share < 1.0
    need = judge(hybrid, HALF_TORCH, "hybrid", min_custom_share=0.99)
    assert need.status is Status.REWARD_HACK and need.rule == "insufficient_custom_share"
