"""Built-in suite, part B (matmul, conv, fusion, attention): manifests and reference solutions.

Covers: manifest sanity for the part-B category folders (numbers 50..99, files present, presets
that rewrite cleanly, FLOP expressions), and a slow numeric check that every hand-written Triton
`ModelNew` matches its `Model` at the `cpu` preset under the Triton interpreter, in a subprocess,
on two input distributions. Does not cover: the evaluator (see tests for evaluation) or GPU sizes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tritonforge.problems.sizing import module_constants, rewrite_constants

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

BUILTIN = Path(__file__).resolve().parents[2] / "src" / "tritonforge" / "problems" / "builtin"
CATEGORIES = ("matmul", "conv", "fusion", "attention")


def _manifest_entries() -> list[tuple[str, dict]]:
    """(category, entry) for every [[problem]] in the part-B manifests."""
    out = []
    for cat in CATEGORIES:
        path = BUILTIN / cat / "manifest.toml"
        if not path.is_file():
            continue
        data = tomllib.loads(path.read_text())
        out.extend((cat, entry) for entry in data["problem"])
    return out


def _cpu_problems() -> list[dict]:
    """Part-B problems at the cpu preset: from `load_builtin` when it exists, else rendered here."""
    try:
        from tritonforge.problems.builtin import load_builtin
    except ImportError:
        load_builtin = None
    if load_builtin is not None:
        probs = [p for p in load_builtin("cpu") if p.category in CATEGORIES]
        return [
            {
                "name": p.name,
                "ref": p.reference_src,
                "sol": p.solution_src or "",
                "atol": p.atol,
                "rtol": p.rtol,
            }
            for p in probs
        ]
    out = []
    for cat, e in _manifest_entries():
        ref = rewrite_constants((BUILTIN / cat / e["file"]).read_text(), e.get("cpu", {}))
        sol = (BUILTIN / cat / e["solution"]).read_text()
        out.append(
            {
                "name": e["name"],
                "ref": ref,
                "sol": sol,
                "atol": e.get("atol"),
                "rtol": e.get("rtol"),
            }
        )
    return out


def test_manifests_are_consistent() -> None:
    entries = _manifest_entries()
    assert len(entries) >= 14
    numbers = [e["number"] for _, e in entries]
    names = [e["name"] for _, e in entries]
    assert len(set(numbers)) == len(numbers) and all(50 <= n <= 99 for n in numbers)
    assert len(set(names)) == len(names)
    for cat, e in entries:
        assert e["level"] == (2 if cat in ("fusion", "attention") else 1), e["name"]
        ref = (BUILTIN / cat / e["file"]).read_text()
        sol = (BUILTIN / cat / e["solution"]).read_text()
        assert "class Model(" in ref and "def get_inputs" in ref and "def get_init_inputs" in ref
        assert "class ModelNew(" in sol and "@triton.jit" in sol and "def get_inputs" not in sol
        for preset in ("cpu", "gpu"):
            consts = module_constants(rewrite_constants(ref, e.get(preset, {})))
            flops = eval(e["flops"], {"__builtins__": {}}, dict(consts))
            assert flops > 0, (e["name"], preset)
        cpu = module_constants(rewrite_constants(ref, e["cpu"]))
        gpu = module_constants(ref)
        assert eval(e["flops"], {}, dict(cpu)) < eval(e["flops"], {}, dict(gpu)) / 100, e["name"]


RUNNER = r"""
import importlib.util, json, sys, time
import torch

TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 2e-2}

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

def shifted(x):
    return x * 2 + 1 if x.is_floating_point() else x

def check(p, d):
    ref = load(p["ref_path"], "ref_" + p["name"])
    sol = load(p["sol_path"], "sol_" + p["name"])
    torch.manual_seed(42)
    model = ref.Model(*ref.get_init_inputs())
    torch.manual_seed(42)
    new = sol.ModelNew(*ref.get_init_inputs())
    worst, times = 0.0, []
    for draw, fn in (("native", lambda x: x), ("shifted", shifted)):
        torch.manual_seed(7)
        xs = [fn(x) if isinstance(x, torch.Tensor) else x for x in ref.get_inputs()]
        keep = [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]
        with torch.no_grad():
            want = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in xs])
            t0 = time.perf_counter()
            got = new(*xs)
            times.append(time.perf_counter() - t0)
        for a, b in zip(xs, keep):
            if isinstance(a, torch.Tensor) and not torch.equal(a, b):
                return {"ok": False, "why": f"{draw}: input mutated"}
        if got.shape != want.shape or got.dtype != want.dtype:
            return {"ok": False, "why": f"{draw}: {tuple(got.shape)} {got.dtype} vs {tuple(want.shape)} {want.dtype}"}
        atol = p["atol"] if p["atol"] is not None else TOL[want.dtype]
        rtol = p["rtol"] if p["rtol"] is not None else TOL[want.dtype]
        diff = (got.double() - want.double()).abs()
        excess = (diff - atol - rtol * want.double().abs()).max().item()
        worst = max(worst, diff.max().item())
        if not excess <= 0:
            return {"ok": False, "why": f"{draw}: max abs diff {diff.max().item():.3g} (atol={atol}, rtol={rtol})"}
    return {"ok": True, "max_abs_diff": worst, "first_s": times[0], "second_s": times[1]}

for p in json.loads(open(sys.argv[1]).read()):
    try:
        res = check(p, None)
    except Exception as exc:  # report, keep going
        res = {"ok": False, "why": f"{type(exc).__name__}: {exc}"}
    res["name"] = p["name"]
    print(json.dumps(res), flush=True)
"""


@pytest.mark.slow
def test_solutions_match_references_on_interpreter(tmp_path: Path) -> None:
    problems = _cpu_problems()
    assert len(problems) >= 14
    spec = []
    for p in problems:
        ref_path, sol_path = tmp_path / f"ref_{p['name']}.py", tmp_path / f"sol_{p['name']}.py"
        ref_path.write_text(p["ref"])
        sol_path.write_text(p["sol"])
        spec.append({**p, "ref_path": str(ref_path), "sol_path": str(sol_path)})
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(tmp_path / "spec.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    for r in results:
        if r["ok"]:
            print(
                f"{r['name']:28s} ok  forward {r['first_s']:.3f}s / {r['second_s']:.3f}s  maxdiff {r['max_abs_diff']:.2e}"
            )
        else:
            print(f"{r['name']:28s} FAIL {r['why']}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["name"] for r in results] == [p["name"] for p in problems]
    failed = {r["name"]: r["why"] for r in results if not r["ok"]}
    assert not failed, failed
