"""What the candidate can reach of the audit, and what the audit runs on its objects.

Covers, in a throw-away process with the audit installed, armed and sealed as in a worker: no
module of the evaluator left in sys.modules, the `__globals__` of an installed stub lead to no
audit state, a forged `tritonforge.*` audit event is refused and named, a stub whose namespace
was rebound fails instead of running unaudited and the tamper check names it, the hook arms
once; in this process: `output_tree` accepts exactly tensors and tuples/lists of them, and
`guard()` runs our tensor code past the candidate's TorchFunctionMode, dispatch mode and Tensor
subclass overrides; which class patches are tampering (a new plain name is not). Does not
cover: the hook's rules (test_attacks.py, test_audit_fs.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from tritonforge.evaluation.sandbox import sealed

PROBE = textwrap.dedent(
    """
    import json, os, sys
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    from tritonforge.evaluation.sandbox import audit, stubs
    from tritonforge.evaluation.sandbox.audit_state import STATE
    audit.preload(cpu=True)
    audit.arm(os.path.abspath("candidate.py"), os.getcwd(), ("triton",), strict=True)
    out = {"sealed": __import__("tritonforge.evaluation.sandbox.sealed").evaluation.sandbox.sealed.seal()}
    out["left"] = sorted(n for n in sys.modules if n.startswith("tritonforge"))
    g = torch.Tensor.numpy.__globals__
    out["globals"] = sorted(k for k in g if not k.startswith("__"))
    out["state_reachable"] = any(hasattr(v, "violations") for v in g.values())
    try:
        sys.audit("tritonforge.trip", 0, [])
        out["forged"] = "accepted"
    except PermissionError:
        out["forged"] = "refused"
    g["_audit"] = lambda *a: None  # the candidate switches the stubs off
    try:
        torch.zeros(2).tolist()
        out["stub"] = "ran"
    except IndexError:
        out["stub"] = "failed"
    audit.tamper_check()
    g["_audit"] = sys.audit
    try:
        audit.arm("x", "y", (), True)
        out["rearm"] = "accepted"
    except Exception as exc:
        out["rearm"] = type(exc).__name__
    out["violations"] = STATE.violations
    print(json.dumps(out))
    """
)


def test_worker_after_sealing(tmp_path) -> None:
    (tmp_path / "probe.py").write_text(PROBE)  # a file: code from "-c" counts as the candidate's
    res = subprocess.run(
        [sys.executable, "probe.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["sealed"] > 5 and out["left"] == []
    assert not out["state_reachable"] and "STATE" not in out["globals"], out["globals"]
    assert out["forged"] == "refused"
    assert out["stub"] == "failed"  # no original to fall back on
    assert out["rearm"] == "AttributeError"  # the hook was dropped after arming
    joined = " | ".join(out["violations"])
    assert "judge_tamper: forged audit event tritonforge.trip" in joined
    assert "stubs were rebound" in joined


CLASS_PATCHES = textwrap.dedent(
    """
    import json, os, sys
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    from tritonforge.evaluation.sandbox import audit
    from tritonforge.evaluation.sandbox.audit_state import STATE
    audit.preload(cpu=True)
    out = {}

    def seen(cls, name):
        STATE.violations.clear()
        before = cls.__dict__.get(name)
        setattr(cls, name, lambda *a: None)
        audit.tamper_check()
        if before is None:
            delattr(cls, name)
        else:
            setattr(cls, name, before)
        return [v for v in STATE.violations if "was patched" in v]

    # what transformers does when it first initialises a model's weights: a new plain name
    out["new_name"] = seen(torch.nn.Module, "smart_apply")
    out["shadow"] = seen(torch.Tensor, "add_")  # a new entry over the C TensorBase.add_
    out["dunder"] = seen(torch.Tensor, "__fspath__")
    out["replaced"] = seen(torch.nn.Module, "to")
    print(json.dumps(out))
    """
)


def test_class_patches_that_matter(tmp_path) -> None:
    """Any change to torch.Tensor/UntypedStorage/nn.Module that could change what the evaluator
    calls is judge_tamper; a new plain name no base class has (transformers' smart_apply on
    nn.Module, added while a level-4 candidate builds its model) is not."""
    (tmp_path / "probe.py").write_text(CLASS_PATCHES)
    res = subprocess.run(
        [sys.executable, "probe.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["new_name"] == []
    assert out["shadow"] == ["judge_tamper: Tensor was patched (add_)"]
    assert out["dunder"] == ["judge_tamper: Tensor was patched (__fspath__)"]
    assert out["replaced"] == ["judge_tamper: Module was patched (to)"]


class Sub(torch.Tensor):
    pass


class Outs(list):
    pass


def test_output_tree_accepts_only_plain_tensors() -> None:
    a, b = torch.ones(2), torch.zeros(3)
    assert sealed.output_tree(a) == [a]
    assert sealed.output_tree((a, [b])) == [a, b]
    for bad in (a.as_subclass(Sub), Outs([a]), {"a": a}, None, 1.0, ((((((((a,),),),),),),),)):
        with pytest.raises(sealed.OutputRejected):
            sealed.output_tree(bad)


def test_guard_runs_no_candidate_override() -> None:
    seen: list[str] = []

    class FM(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append("function mode")
            return func(*args, **(kwargs or {}))

    class DM(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append("dispatch mode")
            return func(*args, **(kwargs or {}))

    class Loud(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append("subclass")
            return super().__torch_function__(func, types, args, kwargs)

    x = torch.arange(4.0).as_subclass(Loud)
    with FM(), DM():
        with sealed.guard():
            copy = sealed.CAP.clone(sealed.bytes_of(x))
            assert sealed.CAP.all_equal(copy, copy[0].item()) is False
    assert seen == [] and copy.dtype == torch.uint8 and copy.numel() == 16
