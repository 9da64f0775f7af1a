"""Static rules (evaluation/judge/checks.py, kernel_checks.py) and the strict-mode glue allowlist (glue.py).

Covers: for every static rule a minimal source that triggers it and a close one that must not
(e.g. `self.modules()` is fine, `sys.modules` is not); which rules apply in hybrid mode; the
statuses for no code, syntax errors and a missing ModelNew; `classify_op` on glue and compute
ops, with overload suffixes. Does not cover: the runtime audit (tests/eval/test_attacks.py).
"""

from __future__ import annotations

import textwrap

import pytest

from tritonforge.evaluation.judge.checks import ALWAYS, run_static
from tritonforge.evaluation.sandbox.glue import GLUE, classify_op
from tritonforge.types import Status

KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

"""


def src(body: str, header: str = KERNEL) -> str:
    """A candidate: the kernel header, then `body` (dedented)."""
    return header + textwrap.dedent(body)


def model(forward: str, prelude: str = "") -> str:
    """A candidate whose forward is `forward` (one or more lines at forward's indentation)."""
    lines = "\n".join("        " + ln for ln in textwrap.dedent(forward).strip().splitlines())
    return src(
        textwrap.dedent(prelude)
        + f"\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n{lines}\n"
    )


def rule_of(source: str, mode: str = "strict") -> str | None:
    r = run_static(source, mode, "triton")
    return r.rule


OK_FORWARD = "out = torch.empty_like(x)\nk[(1,)](x, out, x.numel(), BLOCK=1024)\nreturn out"


def test_a_plain_kernel_passes() -> None:
    r = run_static(model(OK_FORWARD))
    assert r.status is None and r.rule is None and r.findings == []


def test_statuses_before_rules() -> None:
    assert run_static(None).status is Status.NO_CODE
    assert run_static("   \n").status is Status.NO_CODE
    bad = run_static("def f(:\n")
    assert bad.status is Status.SYNTAX_ERROR and "line 1" in bad.message
    assert run_static(KERNEL).status is Status.MISSING_MODEL_NEW


@pytest.mark.parametrize("depth", [150, 1500, 100_000])
def test_deep_nesting_is_a_syntax_error_not_a_judge_failure(depth: int) -> None:
    """`1+1+...+1` deep enough to exhaust the parser's or the rules' recursion (RecursionError
    escaped run_static: internal_error); a shallow one still passes."""
    expr = "+".join(["1"] * depth)
    r = run_static(model(OK_FORWARD, prelude=f"ONE = ({expr}) // {depth}\n"))
    if depth == 150:
        assert r.status is None, r.message
    else:
        assert r.status is Status.SYNTAX_ERROR and "deeper" in r.message, r.message


# (rule, source that triggers it, close source that must pass)
CASES = [
    (
        "no_custom_kernel",
        "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x.relu()\n",
        model(OK_FORWARD),
    ),
    (
        "forbidden_import",
        model(OK_FORWARD, "import socket"),
        model(OK_FORWARD, "import math"),
    ),
    (
        "forbidden_import",
        model(OK_FORWARD, "from tritonforge.evaluation.sandbox import audit"),
        model(OK_FORWARD, "from collections import namedtuple"),
    ),
    ("forbidden_import", model(OK_FORWARD, "from . import sibling"), model(OK_FORWARD)),
    (
        "introspection",
        model("print(sys.modules)\n" + OK_FORWARD, "import sys"),
        model("print(len(list(self.modules())))\n" + OK_FORWARD, "import sys"),
    ),
    (
        "introspection",
        model("f = sys._getframe(1)\n" + OK_FORWARD, "import sys"),
        model("n = sys.getsizeof(x)\n" + OK_FORWARD, "import sys"),
    ),
    (
        "introspection",
        model("g = self.forward.__globals__\n" + OK_FORWARD),
        model("g = self.forward.__name__\n" + OK_FORWARD),
    ),
    (
        "introspection",
        model('g = operator.attrgetter("f_locals")\n' + OK_FORWARD, "import operator"),
        model('g = operator.attrgetter("weight")\n' + OK_FORWARD, "import operator"),
    ),
    (
        "introspection",
        model('imp = __builtins__["open"]\n' + OK_FORWARD),
        model("imp = open\n" + OK_FORWARD),
    ),
    (
        "dynamic_code",
        model('eval("1 + 1")\n' + OK_FORWARD),
        model('int("1")\n' + OK_FORWARD),
    ),
    (
        "dynamic_code",
        model('f = getattr(torch, "re" + "lu")\n' + OK_FORWARD),
        model('f = getattr(self, "training")\n' + OK_FORWARD),
    ),
    (
        "judge_tamper",
        model(OK_FORWARD, "torch.allclose = lambda *a, **k: True"),
        model(OK_FORWARD, "ALLCLOSE = torch.allclose"),
    ),
    (
        "judge_tamper",
        model(OK_FORWARD, 'setattr(time, "perf_counter", lambda: 0.0)\nimport time'),
        model(OK_FORWARD, 'setattr(ModelNew_cfg, "block", 1)\nclass ModelNew_cfg: pass'),
    ),
    (
        "seed_probe",
        model("s = torch.initial_seed()\n" + OK_FORWARD),
        model("s = torch.finfo(x.dtype).eps\n" + OK_FORWARD),
    ),
    (
        "process_control",
        model("os._exit(0)\n" + OK_FORWARD, "import os"),
        model("p = os.path.join('a', 'b')\n" + OK_FORWARD, "import os"),
    ),
    (
        "process_control",
        model(OK_FORWARD, "from os import _exit"),
        model(OK_FORWARD, "from os import path"),
    ),
    (
        "generated_code",
        model("f = torch.compile(torch.relu)\n" + OK_FORWARD),
        model("f = torch.empty_like\n" + OK_FORWARD),
    ),
    (
        "generated_code",
        model(OK_FORWARD, "from torch import jit"),
        model(OK_FORWARD, "from torch import nn as nn2"),
    ),
    (
        "dispatcher_escape",
        model("y = torch.ops.aten.relu.default(x)\n" + OK_FORWARD),
        model("y = torch.empty(3)\n" + OK_FORWARD),
    ),
    (
        "dispatcher_escape",
        model("ctx = torch._C._DisableTorchDispatch()\n" + OK_FORWARD),
        model("ctx = torch.no_grad()\n" + OK_FORWARD),
    ),
    (
        "profiler_tamper",
        model("on = torch.autograd.profiler._is_profiler_enabled\n" + OK_FORWARD),
        model("with torch.profiler.record_function('k'):\n    pass\n" + OK_FORWARD),
    ),
    (
        "python_in_kernel",
        src(
            """
            @triton.jit
            def bad(x_ptr):
                torch.relu(x_ptr)

            class ModelNew(nn.Module):
                pass
            """
        ),
        src(
            """
            import math
            SCALE = math.sqrt(2.0)
            LIMIT = tl.constexpr(4)

            @triton.jit
            def helper(v):
                return v * 2

            @triton.jit
            def good(x_ptr, BLOCK: tl.constexpr):
                y = helper(tl.load(x_ptr)) * SCALE + LIMIT
                tl.store(x_ptr, y)

            class ModelNew(nn.Module):
                pass
            """
        ),
    ),
    (
        "python_in_kernel",
        src(
            """
            STASH = {}

            @triton.jit
            def bad(x_ptr):
                STASH["x"] = 1

            class ModelNew(nn.Module):
                pass
            """
        ),
        src(
            """
            CONFIGS = [triton.Config({"BLOCK": 64})]

            @triton.autotune(configs=CONFIGS, key=["n"])
            @triton.jit
            def good(x_ptr, n, BLOCK: tl.constexpr):
                tl.store(x_ptr, n)

            class ModelNew(nn.Module):
                pass
            """
        ),
    ),
    (
        "reference_reuse",
        src("class Model(nn.Module):\n    pass\n\nclass ModelNew(Model):\n    pass\n"),
        src("class Base(nn.Module):\n    pass\n\nclass ModelNew(Base):\n    pass\n"),
    ),
    (
        "reference_reuse",
        src("class Model(nn.Module):\n    pass\n\nModelNew = Model\n"),
        src("class ModelNew(nn.Module):\n    pass\n"),
    ),
    (
        "reference_reuse",
        model(OK_FORWARD, "from reference import Model"),
        model(OK_FORWARD, "from torch.nn import Module"),
    ),
]


@pytest.mark.parametrize(
    ("rule", "bad", "good"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_rule_fires_and_its_neighbour_passes(rule: str, bad: str, good: str) -> None:
    r = run_static(bad, "strict", "triton")
    assert r.status is Status.REWARD_HACK and r.rule == rule, (r.rule, r.message)
    assert "line" in r.message
    ok = run_static(good, "strict", "triton")
    assert ok.status is None, (ok.rule, ok.message)


def test_every_documented_rule_has_a_case() -> None:
    assert {c[0] for c in CASES} >= ALWAYS | {"no_custom_kernel", "reference_reuse"}


def test_hybrid_applies_only_the_always_rules() -> None:
    for rule, bad, _ in CASES:
        r = run_static(bad, "hybrid", "triton")
        if rule in ALWAYS:
            assert r.rule == rule, rule
        else:
            assert r.status is None, (rule, r.rule)


def test_first_fatal_finding_decides_and_all_are_listed() -> None:
    r = run_static(model("s = torch.initial_seed()\n" + OK_FORWARD, "import socket"))
    assert r.rule == "forbidden_import"
    assert {f.rule for f in r.findings} == {"forbidden_import", "seed_probe"}


def test_aliases_are_resolved() -> None:
    assert rule_of(model("y = T.ops.aten.relu(x)\n" + OK_FORWARD, "import torch as T")) == (
        "dispatcher_escape"
    )
    assert rule_of(model(OK_FORWARD, "from torch import compile as make")) == "generated_code"


# What a name resolves to (issue 14): (rule, line(s) in forward, prelude, a close line that passes)
RESOLVED = [
    ("profiler_tamper", 'on = getattr(torch.autograd, "_profiler_enabled")()', "", "on = True"),
    ("introspection", 'm = getattr(sys, "modules")', "import sys", 'v = getattr(sys, "version")'),
    ("introspection", 'm = sys.modules["os"]', "import sys", "v = sys.version_info[0]"),
    ("judge_tamper", "T.detach = None", "T = torch.Tensor", "t = x.detach()"),
    ("judge_tamper", "P.numpy = None", "P = torch\nQ = P.Tensor\nP = Q", "n = x.numel()"),
    ("judge_tamper", 'setattr(T, "detach", None)', "T = torch.Tensor", 'setattr(self, "k", 1)'),
    (
        "forbidden_import",
        "t = logging.threading.Thread",
        "import logging",
        "lg = logging.getLogger()",
    ),
    ("forbidden_import", "q = queue.threading", "import queue", "q = queue.Queue()"),
    ("forbidden_import", 'c = getattr(email.utils, "socket")', "import email.utils", "n = 1"),
    ("dispatcher_escape", 'C = getattr(torch, "_C")', "", 'f = getattr(torch, "float32")'),
    ("dispatcher_escape", 'C = operator.attrgetter("_C")(torch)', "import operator", "n = 1"),
    ("generated_code", 'c = getattr(torch, "compile")', "", 'e = getattr(torch, "empty")'),
    ("process_control", 'k = getattr(os, "kill")', "import os", 'p = getattr(os, "sep")'),
    ("dynamic_code", 'a = operator.attrgetter("fo" + "rk")(os)', "import operator, os", "n = 1"),
    ("dynamic_code", "f = functools.reduce(getattr, ['x'], x)", "import functools", "n = 1"),
    ("introspection", "setter = object.__setattr__", "", "n = 1"),
]


@pytest.mark.parametrize(
    ("rule", "line", "prelude", "good"),
    RESOLVED,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(RESOLVED)],
)
def test_names_resolved_before_rules(rule: str, line: str, prelude: str, good: str) -> None:
    bad = model(line + "\n" + OK_FORWARD, prelude)
    assert rule_of(bad) == rule, run_static(bad).message
    assert rule_of(bad, "hybrid") == rule  # all of these apply in hybrid mode too
    ok = run_static(model(good + "\n" + OK_FORWARD, prelude))
    assert ok.status is None, (ok.rule, ok.message)


def test_host_views_of_tensor_memory_strict_only() -> None:
    bad = model("spec = x.__array_interface__\n" + OK_FORWARD)
    assert rule_of(bad) == "host_read" and rule_of(bad, "hybrid") is None
    assert rule_of(model('k = "__cuda_array_interface__"\n' + OK_FORWARD)) == "host_read"


KERNEL_HELPER = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

{prelude}


@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, {expr}, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        k[(1,)](x, out, x.numel(), BLOCK=1024)
        return out
"""


@pytest.mark.parametrize(
    ("prelude", "expr", "bad"),
    [
        ("def helper(t):\n    return t", "helper(x)", True),
        ("@triton.jit\ndef helper(t):\n    return t", "helper(x)", False),
        ("ACT = 0\ndef setup():\n    global ACT\n    ACT = print", "ACT(x)", True),
        ("SCALE = 2.0", "x * SCALE", False),
        ("", "x.handle", True),
        ("", "x.to(tl.float32)", False),
    ],
)
def test_python_in_kernel_body(prelude: str, expr: str, bad: bool) -> None:
    r = run_static(KERNEL_HELPER.format(prelude=prelude, expr=expr), "hybrid", "triton")
    assert (r.rule == "python_in_kernel") is bad, (r.rule, r.message)


@pytest.mark.parametrize(
    "name",
    [
        "aten::empty",
        "aten::empty.memory_format",
        "aten::empty_strided",
        "aten::zeros",
        "aten::zero_",
        "aten::fill_.Scalar",
        "aten::view",
        "aten::reshape",
        "aten::permute",
        "aten::transpose.int",
        "aten::t",
        "aten::contiguous",
        "aten::clone",
        "aten::copy_",
        "aten::_to_copy",
        "aten::to.dtype",
        "aten::as_strided",
        "aten::slice.Tensor",
        "aten::select.int",
        "aten::expand",
        "aten::unsqueeze",
    ],
)
def test_glue_ops(name: str) -> None:
    assert classify_op(name) == "glue"


@pytest.mark.parametrize(
    "name",
    [
        "aten::add.Tensor",
        "aten::mul",
        "aten::relu",
        "aten::clamp_min",
        "aten::softmax.int",
        "aten::_softmax",
        "aten::mm",
        "aten::addmm",
        "aten::sum.dim_IntList",
        "aten::_local_scalar_dense",
        "aten::item",
        "aten::index_select",
        "aten::gather",
        "aten::cat",
        "aten::equal",
        "aten::where.self",
        "aten::sigmoid",
    ],
)
def test_compute_ops(name: str) -> None:
    assert classify_op(name) == "compute"


def test_allowlist_has_no_arithmetic() -> None:
    for op in ("add", "mul", "sub", "div", "exp", "sum", "mean", "max", "matmul", "mm", "where"):
        assert op not in GLUE


# Settings of the candidate's own process (issue 31, own_settings.py): setting a seed or a
# performance/numerics flag is allowed in every mode; reading RNG state or seeds stays refused.
OWN_SETTINGS_OK = [
    "torch.manual_seed(42)",
    "torch.cuda.manual_seed(42)",
    "torch.cuda.manual_seed_all(0)",
    "torch.random.manual_seed(3)",
    "random.seed(0)",
    "np.random.seed(0)",
    "torch.set_rng_state(torch.ByteTensor(8))",
    "torch.backends.cudnn.benchmark = True",
    "torch.backends.cudnn.deterministic = True",
    "torch.backends.cudnn.allow_tf32 = True",
    "torch.backends.cuda.matmul.allow_tf32 = True",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False",
    "torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, True",
    "import torch.backends.cudnn as cudnn\ncudnn.benchmark = True",
    "from torch.backends import cudnn\ncudnn.deterministic = True",
    'setattr(torch.backends.cudnn, "benchmark", True)',
    "torch.set_float32_matmul_precision('high')",
    "torch.use_deterministic_algorithms(True)",
]


SEED_READS = [
    "s = torch.initial_seed()",
    "s = torch.seed()",
    "s = torch.random.seed()",
    "s = torch.get_rng_state()",
    "s = torch.cuda.get_rng_state_all()",
    "s = torch.cuda.initial_seed()",
    "g = torch.default_generator",
    "g = torch.cuda.default_generators[0]",
    "ctx = torch.random.fork_rng()",
    "s = random.getstate()",
    "s = np.random.get_state()",
    "from torch import initial_seed",
    "from torch.random import fork_rng",
    "from random import getstate",
]


@pytest.mark.parametrize(
    ("line", "rule"),
    [(line, None) for line in OWN_SETTINGS_OK] + [(line, "seed_probe") for line in SEED_READS],
)
def test_setting_is_allowed_reading_rng_state_is_not(line: str, rule: str | None) -> None:
    source = model(OK_FORWARD, "import random\nimport numpy as np\n" + line)
    for mode in ("strict", "hybrid"):
        r = run_static(source, mode, "triton")
        assert r.rule == rule, (mode, line, r.rule, r.message)
        if rule == "seed_probe":
            assert "torch.Generator" in r.message and "manual_seed" in r.message


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        ("torch.backends.cudnn.benchmark = torch.allclose", None),  # a C setter takes the value
        ("torch.backends.cudnn.foo = 1", "judge_tamper"),  # not a setting of own_settings.py
        ("del torch.backends.cudnn.benchmark", "judge_tamper"),
        ("torch.backends.cuda.matmul = None", "judge_tamper"),
        ("torch.allclose: object = lambda *a, **k: True", "judge_tamper"),
        ("for torch.allclose in [print]:\n    pass", "judge_tamper"),
        ('setattr(torch.backends.cudnn, "enabled_x", 1)', "judge_tamper"),
    ],
)
def test_only_the_listed_settings_may_be_assigned(line: str, rule: str | None) -> None:
    r = run_static(model(OK_FORWARD, line), "hybrid", "triton")
    assert r.rule == rule, (line, r.rule, r.message)


FIELD_IDIOMS = [
    "torch.cuda.synchronize()",
    "with torch.no_grad():\n    pass",
    "@torch.no_grad()\ndef helper(x):\n    return x",
    "with torch.inference_mode():\n    pass",
    "@torch.jit.ignore\ndef helper(x):\n    return x",
    "@torch.jit.unused\ndef helper(x):\n    return x",
    "scripting = torch.jit.is_scripting()",
    "from torch.jit import ignore\n@ignore\ndef helper(x):\n    return x",
    "from dataclasses import dataclass, field\n@dataclass(frozen=True)\nclass Cfg:\n"
    "    block: int = 128\n    sizes: list = field(default_factory=list)",
    "from typing import Optional, Tuple\nT = Optional[Tuple[int, int]]",
    "import functools\n@functools.lru_cache(maxsize=None)\ndef block_for(n: int) -> int:\n"
    "    return triton.next_power_of_2(n)",
    "sm = torch.cuda.get_device_properties(0).multi_processor_count",
]


@pytest.mark.parametrize("line", FIELD_IDIOMS)
def test_honest_field_idioms_pass(line: str) -> None:
    r = run_static(model(OK_FORWARD, line), "strict", "triton")
    assert r.status is None, (line, r.rule, r.message)


@pytest.mark.parametrize(
    "line",
    [
        "f = torch.jit.script(torch.relu)",
        "from torch.jit import trace",
        "ref = torch.compile(Model())",
        "class Model(nn.Module):\n    pass\nfast = torch.compile(Model())",
    ],
)
def test_compiling_or_scripting_stays_generated_code(line: str) -> None:
    assert rule_of(model(OK_FORWARD, line), "hybrid") == "generated_code"
