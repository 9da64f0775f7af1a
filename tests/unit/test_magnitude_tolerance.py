"""The `magnitude` tolerance (compare.py) and the noise scale it uses (noise.py), in process.

Covers: KernelBench issue #165: zeros pass KernelBench's absolute 1e-2 on small outputs (a
softmax over 16384 columns, a small loss) under the older rules and fail under `magnitude` at
the same 1e-2, while an honest result (the reference in float64, rounded) passes; the noise
scale a case carries: about the output's rms for a well-conditioned output, about the
intermediates' size for the mean of a group-normalised tensor (KernelBench L2/23), so honest
rounding there passes; none for exact integer outputs; compare_to_reference uses the case's
noise under every preset; on shifted inputs a layer norm's noise is far above its rms, and the
tolerance adds a few ulps of it, not the preset's atol times it: writing the bias (what a
candidate could answer on shifted draws) fails under kernelbench. Does not cover: judging end to end (tests/eval/test_field_exploits.py).
"""

from __future__ import annotations

import torch

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.compare import compare, compare_to_reference, rms
from tritonforge.evaluation.judge.reference import ReferenceStore
from tritonforge.types import Problem, Status

LOOSE = {"float32": 1e-2}.get  # KernelBench's atol = rtol
STEP = 4 * torch.finfo(torch.float32).eps  # the perturbation of noise.py, in fp32


def test_zeros_on_small_outputs_pass_the_old_rules_only() -> None:
    torch.manual_seed(0)
    x = torch.rand(64, 16384)
    soft = torch.softmax(x, dim=-1)  # every element about 6e-5
    zeros = torch.zeros_like(soft)
    honest = torch.softmax(x.double(), dim=-1).float()
    for rule in ("none", "output_rms"):
        assert compare(soft, zeros, LOOSE, atol_scale=rule)[0] is Status.CORRECT
    status, mm, why = compare(soft, zeros, LOOSE, atol_scale="magnitude", noise=[STEP * rms(soft)])
    assert status is Status.NUMERICAL_MISMATCH and mm.mismatched == soft.numel(), why
    assert compare(soft, honest, LOOSE, atol_scale="magnitude", noise=[STEP * rms(soft)])[0] is (
        Status.CORRECT
    )
    loss = torch.tensor(3e-3)  # a small scalar loss: a constant near it passes only old rules
    near = torch.tensor(-4e-3)
    assert compare(loss, near, LOOSE, atol_scale="output_rms")[0] is Status.CORRECT
    assert compare(loss, near, LOOSE, atol_scale="magnitude")[0] is Status.NUMERICAL_MISMATCH


def _problem(name: str, body: str, inputs: str) -> Problem:
    src = (
        "import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.gn = torch.nn.GroupNorm(4, 16)\n"
        f"    def forward(self, x):\n        return {body}\n"
        f"def get_inputs():\n    return [{inputs}]\ndef get_init_inputs():\n    return []\n"
    )
    return Problem(id=f"t/{name}", suite="t", name=name, reference_src=src)


def test_noise_scale_of_a_case() -> None:
    store = ReferenceStore()
    mm = store.reference(_problem("mm", "x @ x.T", "torch.randn(64, 512)"), "cpu")
    case = store.case(mm, 1, "native")
    ratio = case.noise[0] / (STEP * rms(case.expected))
    assert 0.05 < ratio < 5, ratio  # well conditioned: a few ulps of the output's own size
    gn = store.reference(
        _problem("gn", "self.gn(x).mean(dim=[1, 2])", "torch.rand(8, 16, 256)"), "cpu"
    )
    case = store.case(gn, 1, "native")
    assert rms(case.expected) < 1e-6  # the mean of a normalised tensor: rounding noise
    assert case.noise[0] > 100 * STEP * rms(case.expected)
    # an honest kernel's different summation order: the float64 result, rounded
    with torch.no_grad():
        honest = gn.model.double()(case.inputs[0].double()).float()
    gn.model.float()
    s = EvalSettings()
    assert compare_to_reference(case, honest, s, gn.problem)[0] is Status.CORRECT
    ints = store.reference(_problem("am", "x.argmax(dim=1)", "torch.randn(8, 64)"), "cpu")
    assert store.case(ints, 1, "native").noise == [None]


def test_every_preset_compares_by_magnitude() -> None:
    store = ReferenceStore()
    ref = store.reference(
        _problem("soft", "torch.softmax(x, dim=-1)", "torch.rand(16, 8192)"), "cpu"
    )
    case = store.case(ref, 2, "native")
    zeros = torch.zeros_like(case.expected)
    for preset in ("strict", "kernelbench", "tritonforge"):
        s = EvalSettings.from_preset(preset)
        assert compare_to_reference(case, zeros, s, ref.problem)[0] is Status.NUMERICAL_MISMATCH
        assert compare_to_reference(case, case.expected.clone(), s, ref.problem)[0] is (
            Status.CORRECT
        )


def test_shifted_noise_does_not_open_the_tolerance() -> None:
    store = ReferenceStore()
    src = (
        "import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.ln = torch.nn.LayerNorm(256)\n"
        "    def forward(self, x):\n        return self.ln(x)\n"
        "def get_inputs():\n    return [torch.randn(32, 256)]\ndef get_init_inputs():\n    return []\n"
    )
    ref = store.reference(Problem(id="t/ln", suite="t", name="ln", reference_src=src), "cpu")
    case = store.case(ref, 3, "shifted")
    assert case.noise[0] > 100 * STEP * rms(case.expected)  # shifted: far above its own size
    bias = torch.zeros_like(case.expected)  # the bias (zero here) in place of the normalised rows
    with torch.no_grad():
        honest = ref.model.double()(case.inputs[0].double()).float()
    ref.model.float()
    for preset in ("strict", "kernelbench", "tritonforge"):
        s = EvalSettings.from_preset(preset)
        assert compare_to_reference(case, bias, s, ref.problem)[0] is Status.NUMERICAL_MISMATCH
        assert compare_to_reference(case, honest, s, ref.problem)[0] is Status.CORRECT


def test_a_reference_that_cannot_run_in_float64_has_no_rounding_term() -> None:
    store = ReferenceStore()
    fixed = store.reference(
        _problem("fixed", "x @ torch.ones(256, 4, dtype=torch.float32)", "torch.randn(8, 256)"),
        "cpu",
    )
    assert fixed.wide_runner()([torch.randn(8, 256)]) is None  # float64 x float32 raises
    case = store.case(fixed, 1, "native")
    assert case.rounding == [None] and case.noise[0] is not None
    plain = store.reference(_problem("plain", "x @ x.T", "torch.randn(8, 256)"), "cpu")
    wide = plain.wide_runner()([torch.randn(8, 256)])
    assert wide is not None and wide.dtype == torch.float64
    assert store.case(plain, 1, "native").rounding[0] is not None
