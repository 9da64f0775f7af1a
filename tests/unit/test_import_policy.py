"""The import allowlist (sandbox/import_policy.py) in both places it is enforced.

Covers: the policy on import statements (allowed modules, submodule trees, names taken with
`from` resolved to what they are, the CUDA-only cpp_extension, Inductor's runtime helpers,
relative imports), the static rule (judge/import_rules.py: missing modules left to import_error,
modules of a denied family reached as attributes of allowed ones), every import of the honest
corpora allowed; and, in a throw-away process with the audit armed as in a worker, the runtime
guard (import_guard.py): the candidate's own imports (also of loaded modules), new loads by name
through `importlib.import_module`, `functools.singledispatch` and `map()`, a library's lazy
import allowed unless its module is never loaded, codecs, signal handlers, extension modules,
sub-interpreters. Does not cover: whole candidates (tests/eval/test_attacks*.py).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch  # noqa: F401  (loaded, as in the judge: names taken from it resolve to objects)
import triton.language  # noqa: F401

from tritonforge.evaluation.judge.import_rules import import_refusal, path_refusal
from tritonforge.evaluation.sandbox import import_policy as policy

REPO = Path(__file__).resolve().parents[2]
HONEST = [
    *sorted((REPO / "tests/eval/corpus/legit").glob("*.py")),
    *sorted((REPO / "tests/eval/corpus/field_honest").rglob("*.py")),  # public kernels, if any
    *sorted((REPO / "tests/eval/corpus/hybrid").glob("*.py")),
    *sorted((REPO / "tests/eval/corpus/kernelbench_layout").rglob("*.py")),
    *sorted((REPO / "src/tritonforge/problems/builtin").rglob("*.py")),
]


def refused(statement: str, backend: str = "triton") -> bool:
    node = ast.parse(statement).body[0]
    assert isinstance(node, (ast.Import, ast.ImportFrom))
    return bool(import_refusal(node, backend))


ALLOWED = [
    "import torch",
    "import torch.nn as nn",
    "import torch.nn.functional as F",
    "from torch import nn, Tensor",
    "from torch.utils.checkpoint import checkpoint",
    "from torch.utils import checkpoint",
    "from torch.autograd import Function",
    "import torch.backends.cudnn as cudnn",
    "from torch.jit import ignore",
    "import triton",
    "import triton.language as tl",
    "from triton.language.extra import libdevice",
    "from triton.runtime import driver",
    "from triton import Config, autotune, cdiv",
    "from torch._inductor.runtime import triton_helpers",
    "from torch._inductor.runtime.triton_heuristics import grid",
    "from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math",
    "from torch._inductor.select_algorithm import extern_kernels",
    "from torch._C import _cuda_getCurrentRawStream as get_raw_stream",
    "from __future__ import annotations",
    "import math",
    "from typing import Optional, Tuple",
    "from collections import namedtuple",
    "import collections.abc",
    "from itertools import repeat",
    "from functools import lru_cache",
    "from dataclasses import dataclass",
    "import enum, warnings, logging, random, contextlib, abc, numbers",
    "import tritonforge_no_such_module",  # missing: the candidate's import_error, not a hack
]
REFUSED = [
    "import os",
    "import sys",
    "import numpy as np",
    "from numpy.lib import stride_tricks",
    "import ctypes",
    "import _xxsubinterpreters",
    "import signal",
    "import faulthandler",
    "import importlib",
    "import pickle",
    "import json",
    "import operator",
    "import string",
    "import time",
    "import gc",
    "import inspect",
    "import subprocess",
    "import socket",
    "import triton.testing",
    "from triton.runtime import build",
    "from triton.runtime.build import compile_module_from_src",
    "from triton.language.extra import pkgutil",
    "from torch import os",
    "from torch import _dynamo",
    "from torch.utils import data",
    "import torch.utils.cpp_extension",
    "from torch._C import _disabled_torch_function_impl",
    "import torch._inductor.select_algorithm",
    "from tritonforge.evaluation.sandbox import audit",
    "from . import sibling",
]


@pytest.mark.parametrize("statement", ALLOWED)
def test_allowed(statement: str) -> None:
    assert not refused(statement), import_refusal(ast.parse(statement).body[0], "triton")


@pytest.mark.parametrize("statement", REFUSED)
def test_refused(statement: str) -> None:
    assert refused(statement)


def test_cpp_extension_only_for_the_cuda_backend() -> None:
    statement = "from torch.utils.cpp_extension import load_inline"
    assert refused(statement, "triton") and not refused(statement, "cuda")


def test_every_family_is_out_and_named() -> None:
    for family in policy.DENIED:
        assert family.why
        for module in family.modules:
            if module != "torch.utils.cpp_extension":
                assert not policy.allowed(module, "cuda"), module
            assert family.name in (policy.refusal(module) or ""), module


def test_names_of_unloaded_packages_by_spelling() -> None:
    """A package the judge has not loaded: a denied family's spelling still decides."""
    assert refused("from transformers.utils import import_utils, os")
    assert refused("from transformers.models import os") or "transformers.models" in sys.modules
    assert path_refusal(("einops", "os", "system"), "triton")


def test_attribute_routes_to_denied_modules() -> None:
    for path in ("torch.os.system", "torch.sys.modules", "logging.threading.Thread"):
        assert path_refusal(tuple(path.split(".")), "triton"), path
    for path in ("triton.runtime.build._build", "triton.language.extra.pkgutil", "torch.ctypes"):
        assert path_refusal(tuple(path.split(".")), "triton"), path
    for path in (
        "torch.nn.functional.relu",
        "triton.runtime.driver.active",
        "triton.language.math.exp",
    ):
        assert path_refusal(tuple(path.split(".")), "triton") is None, path
    assert path_refusal(("torch", "signal", "windows", "hann"), "triton") is None  # torch.signal


@pytest.mark.parametrize("path", HONEST, ids=[p.name for p in HONEST])
def test_honest_corpora_import_only_allowed_modules(path: Path) -> None:
    """Every import of an honest candidate is allowed (the field corpus mixes honest and hack
    cases: its honest ones run whole in tests/eval/test_field_kernels.py)."""
    tree = ast.parse(path.read_text())
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    if "class ModelNew" not in path.read_text():
        nodes = []  # a reference or a loader module, not a candidate
    for node in nodes:
        assert not import_refusal(node, "triton"), (path.name, ast.unparse(node))


# --- the runtime guard, in a worker-like process -------------------------------------------

LIBRARY = """
def lazy_wave():
    import wave  # a library's own lazy import
    return wave.__name__

def lazy_subinterpreters():
    import _xxsubinterpreters  # never loaded while the candidate runs, whoever asks
"""

CANDIDATE = """
import functools
import torch

def attempt(name, fn):
    try:
        fn()
        RESULTS[name] = "ok"
    except ImportError as exc:
        RESULTS[name] = "missing" if type(exc) is ModuleNotFoundError else "refused"
    except (PermissionError, RuntimeError):  # RuntimeError: interpreter creation failed
        RESULTS[name] = "blocked"

def stmt_math():
    import math

def stmt_json():
    import json  # loaded already: refused all the same

def from_torch_os():
    from torch import os

def from_torch_nn():
    from torch import nn, Tensor

def missing():
    import tritonforge_no_such_module

def by_name():
    torch.importlib.import_module("_xxsub" + "interpreters")

def by_singledispatch():
    functools.singledispatch(torch.importlib.import_module)("wave")

def by_map():
    list(map(torch.importlib.import_module, ["wave"]))

def handler():
    torch.sys.modules["signal"].signal(10, lambda *a: None)

def extension():
    spec = torch.importlib.util.spec_from_file_location("_cffi_backend", EXTENSION)
    torch.importlib.util.module_from_spec(spec)

def interpreter():
    SUBINTERPRETERS.create()

for fn in (stmt_math, stmt_json, from_torch_os, from_torch_nn, missing, by_name,
           by_singledispatch, by_map, handler, extension, interpreter):
    attempt(fn.__name__, fn)
attempt("library_lazy", LIB.lazy_wave)
attempt("library_never", LIB.lazy_subinterpreters)
attempt("codec", lambda: "x".encode("utf_32_be"))
"""

PROBE = """
import importlib.util, json, os, sys, _xxsubinterpreters
os.environ["TRITON_INTERPRET"] = "1"
sys.modules.pop("_xxsubinterpreters")  # loaded, then forgotten: imports of it are new loads
import torch
from tritonforge.evaluation.sandbox import audit
from tritonforge.evaluation.sandbox.audit_state import STATE
sys.path.insert(0, os.getcwd())
import library
audit.preload(cpu=True)
audit.arm(os.path.abspath("candidate.py"), os.getcwd(), ("triton",), strict=True)
spec = importlib.util.spec_from_file_location("candidate", "candidate.py")
module = importlib.util.module_from_spec(spec)
audit.guard_module(module.__dict__)
results = {}
module.__dict__.update(
    RESULTS=results, LIB=library, EXTENSION=sys.argv[1], SUBINTERPRETERS=_xxsubinterpreters
)
spec.loader.exec_module(module)
print(json.dumps({"results": results, "violations": STATE.violations}))
"""


def test_runtime_guard(tmp_path: Path) -> None:
    import _cffi_backend

    (tmp_path / "candidate.py").write_text(textwrap.dedent(CANDIDATE))
    (tmp_path / "library.py").write_text(textwrap.dedent(LIBRARY))
    (tmp_path / "probe.py").write_text(textwrap.dedent(PROBE))
    res = subprocess.run(
        [sys.executable, "probe.py", _cffi_backend.__file__],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["results"] == {
        "stmt_math": "ok",
        "stmt_json": "refused",
        "from_torch_os": "refused",
        "from_torch_nn": "ok",
        "missing": "missing",
        "by_name": "refused",
        "by_singledispatch": "refused",
        "by_map": "refused",
        "handler": "blocked",
        "extension": "blocked",
        "interpreter": "blocked",
        "library_lazy": "ok",
        "library_never": "blocked",  # the `import` audit event, before the load stub
        "codec": "ok",
    }, out
    rules = [v.split(":", 1)[0] for v in out["violations"]]
    assert {"forbidden_import", "signal_handler", "native_code", "sub_interpreter"} <= set(rules)
