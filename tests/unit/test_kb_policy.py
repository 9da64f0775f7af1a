"""Strict/hybrid policy for real KernelBench output, on hand-made facts and static sources.

Covers: the epilogue decision (decide.epilogue: a final reduction/scale of kernel output after
the last launch; everything else stays torch_compute; malformed worker reports mean no
epilogue; hybrid reports it in the audit), composite view/shape ops recorded by the profiler
under their own names are glue (the profiler is run here on the real ops), the global-RNG rule
(private generators allowed, every read of a global RNG's state blocked, the message names
torch.Generator), and the Inductor runtime allowance: which paths are allowed, the compiler
reached directly or through a helper module is not, which modules the worker pre-imports, the
helper modules import no module that the deny list misses, and the classic `grid` helper's
semantics (PyTorch 2.5: last numel is x).
Does not cover: judging whole candidates (tests/eval/test_field_kernels.py).
"""

from __future__ import annotations

import types

import pytest
import torch

from helpers.replies import trial_facts
from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge import decide, inductor_rules, replies
from tritonforge.evaluation.judge.checks import run_static
from tritonforge.evaluation.sandbox.glue import classify_op
from tritonforge.evaluation.sandbox.inductor_compat import classic_grid

WRITTEN = {"numel": 10, "launched_on": True, "from_kernel": True}


def wire(log, ops, launches=2):
    """One trial's audit as the worker sends it."""
    return {
        "launches": launches,
        "launches_ok": launches,
        "snapshotted": launches,
        "wrote_any": True,
        "kernels": ["k"],
        "ops": ops,
        "glue": {},
        "op_shapes": [],
        "compute_log": log,
        "violations": [],
        "integrity": {"armed": "", "glue": ""},
    }


def trial(log, ops, launches=2):
    """The audit as the judge sees it: parsed once (judge/replies.py)."""
    return replies._audit(wire(log, ops, launches))


def rule(audit, mode="strict"):
    facts = trial_facts({"provenance": [WRITTEN]})
    hit = decide.decide_audit(audit, facts, EvalSettings(mode=mode), False)
    return hit[0] if hit else None


def test_final_mean_over_kernel_output_is_an_epilogue() -> None:
    a = trial([["aten::mean", True, 2]], {"aten::mean": 1})
    assert decide.epilogue(a) == {"aten::mean": 1}
    assert rule(a) == "torch_epilogue"
    assert rule(a, "hybrid") is None
    assert decide.audit_record([a, a]).epilogue_ops == {"aten::mean": 2}


def test_sum_then_div_is_an_epilogue_of_two() -> None:
    a = trial(
        [["aten::sum", True, 1], ["aten::div.Tensor", True, 1]], {"aten::sum": 1, "aten::div": 1}, 1
    )
    assert decide.epilogue(a) == {"aten::sum": 1, "aten::div": 1}


@pytest.mark.parametrize(
    "log, ops, why",
    [
        ([["aten::mean", True, 1]], {"aten::mean": 1}, "a kernel ran after it"),
        ([["aten::mean", False, 2]], {"aten::mean": 1}, "it read a tensor no kernel wrote"),
        ([["aten::mm", True, 2]], {"aten::mm": 1}, "a matmul is not O(output)"),
        ([["aten::mean", True, 2]] * 3, {"aten::mean": 3}, "more than two ops"),
        ([["aten::mean", True, 2]], {"aten::mean": 1, "aten::linear": 1}, "the profiler saw more"),
        ([], {"aten::relu": 1}, "no log"),
    ],
)
def test_not_an_epilogue(log, ops, why) -> None:
    a = trial(log, ops)
    assert decide.epilogue(a) == {}, why
    assert rule(a) == "torch_compute", why


@pytest.mark.parametrize(
    "log, why",
    [
        ([["aten::mean", "yes", 2]], "malformed flag"),
        ([["aten::mean", True]], "malformed entry"),
        ("aten::mean", "not a list"),
        ([["aten::mean", True, -1]], "a negative count"),
    ],
)
def test_a_malformed_log_does_not_parse(log, why) -> None:
    """The worker's log is its word: one that does not parse is a protocol_violation (the
    judge's CandidateRun.ask), not an audit to decide on."""
    with pytest.raises(replies.ReplyError):
        replies._audit(wire(log, {"aten::mean": 1}))


def test_no_launch_means_no_epilogue() -> None:
    a = trial([["aten::mean", True, 0]], {"aten::mean": 1}, launches=0)
    assert decide.epilogue(a) == {}


def test_composite_view_ops_are_glue() -> None:
    """The profiler records these under their own names (not only their view children)."""
    x, y = torch.randn(4, 4), torch.randn(16)
    with torch.no_grad(), torch.autograd.profiler.profile(use_kineto=False) as prof:
        y.reshape_as(x), y.view_as(x), torch.randn(4, 1).expand_as(x)
        torch.empty_strided((4, 4), (4, 1)), x.mT, x.T, x.ravel(), torch.broadcast_to(y[:4], (4, 4))
        x.mH, x.adjoint(), torch.atleast_2d(y), torch.tensor_split(y, 2), torch.moveaxis(x, 0, 1)
    top = {e.name for e in prof.function_events if e.cpu_parent is None and e.name != "aten::randn"}
    assert {"aten::reshape_as", "aten::mT", "aten::ravel", "aten::broadcast_to"} <= top
    assert {n: classify_op(n) for n in top} == {n: "glue" for n in top}


SEED_SRC = """import torch, triton, triton.language as tl
import numpy as np, random
@triton.jit
def k(x):
    pass
class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        {line}
"""


@pytest.mark.parametrize(
    "line",
    [
        "g = torch.Generator(); g.manual_seed(3)",
        "self.g = torch.Generator(device='cpu').manual_seed(3)",
        "w = torch.randn(4, generator=torch.Generator().manual_seed(7))",
        "r = np.random.default_rng(0)",
        "r = random.Random(0)",
    ],
)
def test_private_generators_allowed(line: str) -> None:
    r = run_static(SEED_SRC.format(line=line))
    assert r.status is None, r.message


@pytest.mark.parametrize(
    "line",
    [
        "s = torch.initial_seed()",
        "st = torch.default_generator.get_state()",
        "g = torch.default_generator",
        "torch.set_rng_state(torch.get_rng_state())",
        "random.setstate(random.getstate())",
        "ctx = torch.random.fork_rng()",
    ],
)
def test_global_rng_reads_blocked_in_both_modes(line: str) -> None:
    """Reading the global RNG stays refused; setting it is allowed (tests/unit/test_checks.py)."""
    for mode in ("strict", "hybrid"):
        r = run_static(SEED_SRC.format(line=line), mode)
        assert r.rule == "seed_probe", (line, mode, r.rule)
        assert "torch.Generator()" in r.message


@pytest.mark.parametrize(
    "path",
    [
        "torch._inductor.runtime.triton_heuristics.grid",
        "torch._inductor.runtime.triton_heuristics.pointwise",
        "torch._inductor.runtime.triton_heuristics",
        "torch._inductor.runtime",
        "torch._inductor.runtime.triton_helpers.maximum",
        "torch._inductor.runtime.triton_helpers.libdevice",
        "torch._inductor.runtime.hints.DeviceProperties",
        "torch._inductor.select_algorithm.extern_kernels",
        "torch._inductor.select_algorithm.extern_kernels.addmm",
        "torch._C._dynamo.guards.assert_size_stride",
        "torch._C._dynamo.guards._empty_strided_cuda",
        "torch._C._dynamo.guards._reinterpret_tensor",
        "torch._C._cuda_getCurrentRawStream",
    ],
)
def test_inductor_runtime_paths_allowed(path: str) -> None:
    assert inductor_rules.allowed(tuple(path.split(".")))


@pytest.mark.parametrize(
    "path",
    [
        "torch._inductor",
        "torch._inductor.compile_fx.compile_fx",
        "torch._inductor.compile_fx",
        "torch._inductor.standalone_compile",
        "torch._inductor.async_compile.AsyncCompile",
        "torch._inductor.select_algorithm",
        "torch._inductor.select_algorithm.autotune_select_algorithm",
        "torch._inductor.runtime.triton_heuristics.CachingAutotuner",
        "torch._inductor.runtime.triton_heuristics.torch",
        "torch._inductor.runtime.hints.torch",
        "torch._inductor.runtime.triton_helpers.__dict__",
        "torch._C._dynamo.guards.GuardManager",
        "torch._C._dynamo",
        "torch._C._set_grad_enabled",
    ],
)
def test_compiler_and_internals_not_allowed(path: str) -> None:
    assert not inductor_rules.allowed(tuple(path.split(".")))


COMPILER_SOURCES = {
    "direct": "from torch._inductor.compile_fx import compile_fx",
    "package": "import torch._inductor",
    "through_helper": "from torch._inductor.runtime import hints\nf = hints.torch.compile",
    "through_alias": "import torch._inductor.runtime.triton_heuristics as th\nf = th.torch._dynamo",
    "attribute": "f = torch._inductor.runtime.triton_heuristics.torch._inductor.compile_fx",
    "guards_internal": "f = torch._C._dynamo.guards.GuardManager",
    "async_compile": "from torch._inductor.async_compile import AsyncCompile",
}


@pytest.mark.parametrize("name", sorted(COMPILER_SOURCES))
def test_compiler_rejected_statically(name: str) -> None:
    src = f"import torch, triton\n{COMPILER_SOURCES[name]}\n" + SEED_SRC.format(line="pass")
    for mode in ("strict", "hybrid"):
        r = run_static(src, mode)
        assert r.rule in ("generated_code", "dispatcher_escape"), (name, mode, r.rule, r.message)


def test_preimports_follow_what_is_used() -> None:
    src = (
        "import torch, triton\n"
        "from torch._inductor.runtime import triton_helpers\n"
        "import torch._inductor.runtime.hints as hints\n"
        "empty = torch._C._dynamo.guards._empty_strided_cpu\n"
    ) + SEED_SRC.format(line="pass")
    r = run_static(src)
    assert r.status is None, r.message
    assert r.preimports == [
        "torch._inductor.runtime.triton_helpers",
        "torch._inductor.runtime.hints",
    ]
    assert run_static(SEED_SRC.format(line="pass")).preimports == []


def test_helper_modules_import_no_module_the_deny_list_misses() -> None:
    """A helper module whose every public name is allowed (ANY) must not hand out a module that
    leads back to torch or the process: the installed PyTorch is checked here."""
    import importlib

    harmless = {"triton", "tl", "math", "pymath", "libdevice"}
    for module, names in inductor_rules.RUNTIME.items():
        if names is not inductor_rules.ANY:
            continue
        mod = importlib.import_module(".".join(module))
        modules = {k for k, v in vars(mod).items() if isinstance(v, types.ModuleType)}
        leaked = modules - inductor_rules.MODULE_NAMES - harmless
        assert not leaked, (".".join(module), leaked)
        for k in modules - harmless:
            assert not inductor_rules.allowed((*module, k))


def test_classic_grid_semantics() -> None:
    assert classic_grid(1000)({"XBLOCK": 128}) == (8, 1, 1)
    assert classic_grid(16, 100)({"XBLOCK": 32, "YBLOCK": 4}) == (4, 4, 1)  # last is x
    assert classic_grid(2, 3, 5)({"XBLOCK": 2}) == (3, 3, 2)  # no Y/ZBLOCK: the numel itself
    with pytest.raises(AssertionError):
        classic_grid()


def test_hf_config_crosses_only_from_the_judge() -> None:
    """A level-4 init input (a transformers config) travels as its dict and is rebuilt only
    where the judge's values are read (`objects=True`); a worker's reply cannot carry one."""
    import os

    transformers = pytest.importorskip("transformers")
    from tritonforge.evaluation.sandbox.protocol import ProtocolError, _build, pack, unpack

    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4)
    desc, fd = pack(["gpt2", cfg, torch.ones(2)])
    try:
        name, back, t = unpack(desc, fd, objects=True)
        assert name == "gpt2" and type(back) is type(cfg) and back.to_dict() == cfg.to_dict()
        assert torch.equal(t, torch.ones(2))
        with pytest.raises(ProtocolError):
            unpack(desc, fd)
    finally:
        os.close(fd)
    with pytest.raises(ProtocolError):
        _build({"t": "hf_config", "v": {"n_layer": 2}}, [], 0, objects=True)
