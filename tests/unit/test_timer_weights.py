"""The judge's reference weights handed to the timing process (judge/timer_weights.py and
sandbox/reference_host.py's `from_weights`): a model built on the meta device and given the
judge's tensors by name is the judge's model (same parameters, buffers, ties, outputs); what
that cannot reproduce is refused with a reason, so the process builds it in full."""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn as nn

from tritonforge.evaluation.judge.timer_weights import collect, loose_tensors, offer
from tritonforge.evaluation.sandbox.protocol import unpack
from tritonforge.evaluation.sandbox.reference_host import from_weights, meta_left

SOURCES = {
    "linear_conv_bn": """
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.conv = nn.Conv1d(1, 2, 3)
        self.bn = nn.BatchNorm1d(2)
        self.bias = nn.Parameter(torch.randn(n))
    def forward(self, x):
        y = self.fc(x) + self.bias
        return self.bn(self.conv(y[:, None, :]))
""",
    "tied_and_non_persistent": """
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.a = nn.Linear(n, n, bias=False)
        self.b = nn.Linear(n, n, bias=False)
        self.b.weight = self.a.weight
        self.register_buffer("scale", torch.rand(n), persistent=False)
    def forward(self, x):
        return self.b(self.a(x)) * self.scale
""",
}
LOOSE = """
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.mask = torch.rand(n) > 0.5          # a plain tensor attribute
    def forward(self, x):
        return self.fc(x) * self.mask
"""
META_FAILS = """
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.k = int(self.fc.weight.abs().sum().item() > 0)   # data: not on the meta device
    def forward(self, x):
        return self.fc(x) * self.k
"""


def module(src: str) -> types.ModuleType:
    mod = types.ModuleType("ref_under_test")
    exec(src, mod.__dict__)
    return mod


def built(src: str, n: int = 8) -> tuple[types.ModuleType, nn.Module]:
    mod = module(src)
    torch.manual_seed(42)
    return mod, mod.Model(n)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_model_given_the_judges_weights_is_the_judges_model(name: str) -> None:
    mod, judge = built(SOURCES[name])
    x = torch.randn(4, 8)
    judge(x)  # the judge's trials ran it (batch norm's running statistics moved)
    w = collect(judge)
    assert w is not None
    model, why = from_weights(mod, [8], w.spec(), [t.clone() for t in w.tensors])
    assert model is not None, why
    assert not meta_left(model)
    ours, theirs = dict(model.named_buffers()), dict(judge.named_buffers())
    assert ours.keys() == theirs.keys()  # the non-persistent buffer too
    mine = dict(model.named_parameters(remove_duplicate=False))
    for key, t in judge.named_parameters(remove_duplicate=False):
        assert torch.equal(mine[key], t) and mine[key].requires_grad == t.requires_grad, key
    for key, t in theirs.items():
        assert torch.equal(ours[key], t), key
    torch.testing.assert_close(model(x), judge(x))
    if name == "tied_and_non_persistent":
        assert model.a.weight is model.b.weight  # tied in the judge: tied here
        assert len(w.tensors) == 2 and w.names.count("a.weight") == 1


def test_weights_travel_through_a_memfd_and_come_back_equal() -> None:
    """The CPU (and no-sharing GPU) path: a sealed memfd, unpacked into private memory."""
    mod, judge = built(SOURCES["linear_conv_bn"])
    parcel = offer(judge, "cpu", shared=True)  # no device buffers on a CPU: a memfd
    assert not parcel.buffers and len(parcel.fds) == 1
    spec = parcel.msg["weights"]
    tensors = list(unpack(spec["desc"], parcel.fds[0], keep_strides=True))
    parcel.discard("cpu")
    model, why = from_weights(mod, [8], spec, tensors)
    assert model is not None, why
    assert torch.equal(model.fc.weight, judge.fc.weight)
    model.fc.weight.data.add_(1)  # private memory: writable, and not the judge's
    assert not torch.equal(model.fc.weight, judge.fc.weight)


def test_a_model_holding_a_plain_tensor_gets_a_full_build() -> None:
    _, judge = built(LOOSE)
    assert loose_tensors(judge) == ["mask"]
    assert collect(judge) is None and offer(judge, "cpu", False).msg == {}
    assert collect(lambda x: x) is None  # not a module: nothing to share


def test_what_the_meta_device_cannot_build_is_refused_with_a_reason() -> None:
    mod, judge = built(META_FAILS)
    w = collect(judge)
    assert w is not None
    model, why = from_weights(mod, [8], w.spec(), w.tensors)
    assert model is None and "meta device" in why
    # a loose tensor the judge's side missed is caught here: meta tensors left
    mod, judge = built(LOOSE)
    spec = {"names": ["fc.weight", "fc.bias"], "index": [0, 1], "params": [True, True]}
    model, why = from_weights(mod, [8], spec, [judge.fc.weight, judge.fc.bias])
    assert model is None and "mask" in why
    # a shape that differs (another init input): refused
    spec = {"names": ["fc.weight"], "index": [0], "params": [True]}
    model, why = from_weights(mod, [8], spec, [torch.zeros(3, 3)])
    assert model is None and "fc.weight" in why


def test_weights_the_wire_cannot_carry_are_not_offered() -> None:
    """protocol.py carries at most MAX_TENSORS tensors of its dtypes per descriptor: a level-3
    CNN's batch norms alone exceed the count. Such a model (and one whose tensors hold no bytes)
    is built in the timing process as before; offering it raised out of the timing (every
    evaluation of the problem an internal error)."""
    many = nn.Sequential(*[nn.BatchNorm1d(4) for _ in range(13)])  # 65 tensors
    assert len(collect(many).tensors) == 65
    assert offer(many, "cpu", False).msg == {}
    odd = nn.Linear(2, 2).to(torch.complex128)
    assert offer(odd, "cpu", False).msg == {}
    empty = nn.Linear(0, 0)
    assert offer(empty, "cpu", False).msg == {}
    assert offer(nn.Linear(2, 2), "cpu", False).msg  # (and an ordinary one is offered)


def test_a_lazy_module_is_refused_with_a_reason_not_an_error() -> None:
    src = """
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.LazyLinear(n)
    def forward(self, x):
        return self.fc(x)
"""
    mod, judge = built(src)
    judge(torch.randn(2, 8))  # materialised in the judge, not on the meta device
    w = collect(judge)
    model, why = from_weights(mod, [8], w.spec(), w.tensors)
    assert model is None and "placing the judge's weights" in why
