"""Degenerate problems (judge/degenerate.py) and the constant-output rule (judge/constant.py).

Covers: measured degeneracy: the mean of a group-normalised tensor (KernelBench L2/23) and an
exact zero (L2/80's max, minus its mean, GELU) do not depend on the inputs, a clamp that every
input saturates followed by dropout in training mode (L2/83) neither (one dropout mask for all
runs); an input no output uses is reported; ordinary problems (a matmul, a get_inputs without
randomness) are not; a reference that fails on a redraw is "not measured", never raised;
`degeneracy` measures once per reference. The rewards read `Verdict.degenerate`: correctness
only. The constant rule: fingerprints, an output repeated bit for bit across trials whose
expected outputs differ is named, a repeat on a degenerate output is not a hack. Does not cover:
the sandboxed path (tests/eval/test_field_exploits.py) or the CLI (tests/unit/test_cli_problems_check.py).
"""

from __future__ import annotations

import torch

from tritonforge.evaluation.judge.constant import OutputTrace, constant_rule, fingerprint
from tritonforge.evaluation.judge.degenerate import degeneracy, measure
from tritonforge.evaluation.judge.reference import ReferenceStore
from tritonforge.rollout.rewards import compute_reward
from tritonforge.types import Problem, Status, Verdict


def _ref(name: str, init: str, forward: str, inputs: str, store: ReferenceStore | None = None):
    src = (
        "import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n"
        f"    def __init__(self):\n        super().__init__()\n{init}"
        f"    def forward(self, *xs):\n        return {forward}\n"
        f"def get_inputs():\n    return [{inputs}]\ndef get_init_inputs():\n    return []\n"
    )
    store = store or ReferenceStore()
    return store.reference(Problem(id=f"t/{name}", suite="t", name=name, reference_src=src), "cpu")


GN = "        self.conv = nn.Conv1d(3, 8, 3)\n        self.gn = nn.GroupNorm(4, 8)\n"
LIN = "        self.lin = nn.Linear(32, 16)\n"


def test_constant_outputs_are_found() -> None:
    l2_23 = _ref(
        "gn_mean", GN, "self.gn(self.conv(xs[0])).mean(dim=[1, 2])", "torch.rand(4, 3, 64)"
    )
    found = measure(l2_23)
    assert found.degenerate and found.constant_outputs == (0,), found
    assert "output 0 does not depend on the inputs" in found.reason
    l2_80 = _ref(
        "max_sub",
        LIN,
        "torch.nn.functional.gelu((lambda y: y - y.mean(dim=1, keepdim=True))("
        "self.lin(xs[0]).max(dim=1, keepdim=True).values))",
        "torch.randn(8, 32)",
    )
    assert measure(l2_80).constant_outputs == (0,)
    drop = "        self.drop = nn.Dropout(0.5)\n"
    l2_83 = _ref(
        "clamp_drop", drop, "self.drop(torch.clamp(xs[0], min=2.0, max=3.0))", "torch.rand(64, 64)"
    )
    assert measure(l2_83).constant_outputs == (0,)


def test_unused_input_and_ordinary_problems() -> None:
    unused = _ref("unused", "", "xs[0] * 2", "torch.randn(16), torch.randn(16)")
    found = measure(unused)
    assert found.unused_inputs == (1,) and found.constant_outputs == (), found
    assert "input 1 is unused" in found.reason
    assert not measure(
        _ref("mm", "", "xs[0] @ xs[1]", "torch.randn(8, 8), torch.randn(8, 4)")
    ).degenerate
    fixed = _ref("fixed", "", "xs[0].sum(dim=1)", "torch.full((8, 16), 0.3)")  # shifted instead
    assert not measure(fixed).degenerate
    ones = measure(_ref("ones", "", "xs[0].sum(dim=1)", "torch.ones(8, 16)"))  # never varies
    assert ones.constant_outputs == (0,) and "do not vary between draws" in ones.reason
    two = _ref("two_out", LIN, "(self.lin(xs[0]), torch.zeros(3))", "torch.randn(4, 32)")
    assert measure(two).constant_outputs == (1,)


def test_degeneracy_is_measured_once_and_never_raises() -> None:
    ref = _ref("once", "", "xs[0] + 1", "torch.randn(4)")
    first = degeneracy(ref)
    assert degeneracy(ref) is first and not first.degenerate
    count = "        self.n = 0\n"
    fails_third = (
        "(setattr(self, 'n', self.n + 1), xs[0] if self.n < 3 else "
        "(_ for _ in ()).throw(ValueError('no')))[1]"
    )
    found = degeneracy(_ref("broken", count, fails_third, "torch.rand(4)"))
    assert not found.degenerate and "ValueError" in found.error


def test_rewards_give_a_degenerate_problem_correctness_only() -> None:
    for name in ("tritonforge", "kevin", "log_speedup"):
        plain = Verdict(status=Status.CORRECT, speedup=3.0)
        flagged = Verdict(status=Status.CORRECT, speedup=3.0, degenerate="output 0 ...")
        assert compute_reward(plain, name) > 0.3
        assert compute_reward(flagged, name) == 0.3, name
    flagged = Verdict(status=Status.CORRECT, speedup_vs_compile=3.0, degenerate="x")
    assert compute_reward(flagged, "tritonforge_original") == 0.3


def test_fingerprints_and_the_trace() -> None:
    x = torch.randn(10000)
    assert fingerprint(x, 1) == fingerprint(x.clone(), 1)
    y = x.clone()
    y[1234] += 1.0  # unsampled positions still change the sums
    assert fingerprint(x, 1) != fingerprint(y, 1)
    assert fingerprint(x.bfloat16(), 1) != fingerprint(x, 1)
    trace = OutputTrace()
    const = torch.full((4,), 0.5)
    assert trace.add(const, torch.randn(4)) == []
    assert trace.add(const, torch.randn(4)) == [0]
    trace = OutputTrace()
    assert trace.add(torch.randn(4), torch.ones(4)) == []
    assert trace.add(const, torch.ones(4)) == []  # the reference repeated itself too


def test_constant_rule_asks_the_problems_degeneracy() -> None:
    store = ReferenceStore()
    live = _ref("live", "", "xs[0].mean()", "torch.rand(64)", store)
    trace = OutputTrace()
    assert constant_rule(trace, live, torch.tensor(0.5), torch.tensor(0.49)) is None
    hit = constant_rule(trace, live, torch.tensor(0.5), torch.tensor(0.51))
    assert hit is not None and hit[0] == "constant_output"
    dead = _ref(
        "dead", GN, "self.gn(self.conv(xs[0])).mean(dim=[1, 2])", "torch.rand(2, 3, 16)", store
    )
    trace = OutputTrace()
    zeros = torch.zeros(2)
    assert constant_rule(trace, dead, zeros, torch.full((2,), 1e-9)) is None
    assert constant_rule(trace, dead, zeros, torch.full((2,), -2e-9)) is None  # degenerate
