"""How close honest kernels come to the comparison's tolerance, per rule and input distribution.

For each honest candidate (the built-in suite's solutions, tests/eval/corpus/legit, and the
corpus/field cases whose expected hybrid verdict is correct), each input distribution and a few
hidden seeds: the reference case the judge builds (reference.ReferenceStore: inputs, expected
outputs, the measured noise scale), the candidate run in this process (trusted corpora only:
no sandbox), and its margin, max over elements of |got - expected| / (atol * scale + rtol *
|expected|), under the `magnitude` rule and the older `output_rms` one, at the strict per-dtype
tolerances and at KernelBench's 1e-2. A margin above 1 fails. On a CPU the candidates run under
Triton's interpreter (TRITON_INTERPRET=1, set here for `--device cpu`): the figures are the
interpreter's numerics, not a GPU's.

    python benchmarks/tolerance_margin.py --device cpu --out docs/bench/cpu_tolerance_margin.json
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

_ARGV_DEVICE = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv[:-1] else "cpu"
if _ARGV_DEVICE == "cpu":  # before anything imports Triton
    os.environ.setdefault("TRITON_INTERPRET", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

import torch  # noqa: E402

from tritonforge.config.eval import DEFAULT_TOLERANCES  # noqa: E402
from tritonforge.evaluation.judge.compare import tolerances  # noqa: E402
from tritonforge.evaluation.judge.reference import INIT_SEED, ReferenceStore  # noqa: E402
from tritonforge.types import Problem  # noqa: E402

RULES = ("magnitude", "output_rms")
TOLS = {"strict": None, "kernelbench": 1e-2}


def honest_cases() -> list[tuple[str, Problem, str]]:
    """(name, problem, source) of every honest candidate of the three corpora."""
    import helpers.hack_corpus as hc
    from tritonforge.problems import load_suite

    out = [(f"builtin/{p.name}", p, p.solution_src) for p in load_suite("builtin", size="cpu")]
    for c in hc.cases("legit"):
        out.append((f"legit/{c['file']}", hc.problem(c["problem"]), c["source"]))
    for c in hc.cases("field"):
        if c.get("hybrid") == "correct" and c.get("device") != "cuda":
            out.append((f"field/{c['file']}", hc.problem(c["problem"]), c["source"]))
    return out


def _margin(
    e: torch.Tensor, g: torch.Tensor, tol: float, rule: str, noise: float, rounding: float
) -> float:
    if not (e.is_floating_point() or e.is_complex()):
        return 0.0 if torch.equal(e, g.to(e.device)) else float("inf")
    e64, g64 = e.double(), g.to(e.device).double()
    a_eff, r_eff, _ = tolerances(e, tol, tol, rule, noise, rounding)
    bound = a_eff + r_eff * e64.abs()
    ok = torch.isfinite(e64) & torch.isfinite(g64)
    diff = (e64 - g64).abs()[ok]
    bound = bound[ok]
    if diff.numel() == 0:
        return 0.0
    if bool(((bound == 0) & (diff > 0)).any()):
        return float("inf")
    ratio = torch.where(bound > 0, diff / bound.clamp_min(1e-300), torch.zeros_like(diff))
    return float(ratio.max())


def _clean(text: str) -> str:
    """An error message without this machine's paths (committed files name none)."""
    text = text.replace(str(ROOT), ".")
    return re.sub(r"/\S*/(site-packages|dist-packages)/", r"\1/", text)


def _items(v: Any) -> list[Any]:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def run_case(source: str, problem: Problem, ref: Any, inputs: list[Any], device: str) -> Any:
    path = Path("/tmp") / f"tf_margin_{abs(hash(source))}.py"
    path.write_text(source)
    mod: dict[str, Any] = {"__name__": "tf_candidate", "__file__": str(path)}
    exec(compile(source, str(path), "exec"), mod)
    torch.manual_seed(INIT_SEED)
    model = mod["ModelNew"](*ref.init_inputs)
    if isinstance(model, torch.nn.Module):
        model = model.to(device)
    with torch.no_grad():
        return model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])


def measure(name: str, problem: Problem, source: str, args: Any, store: Any) -> dict[str, Any]:
    ref = store.reference(problem, args.device)
    row: dict[str, Any] = {"case": name, "margins": {}, "errors": []}
    for dist in args.distributions:
        for seed in range(args.seeds):
            case = store.case(ref, 1000 + seed, dist)
            try:
                got = run_case(source, problem, ref, case.inputs, args.device)
            except Exception as exc:  # a candidate that fails to run is reported, not raised
                row["errors"].append(_clean(f"{dist}/{seed}: {type(exc).__name__}: {exc}")[:300])
                continue
            for k, (e, g) in enumerate(zip(_items(case.expected), _items(got))):
                if not isinstance(e, torch.Tensor):
                    continue
                noise = (case.noise[k] if case.noise else None) or 0.0
                rounding = (case.rounding[k] if case.rounding else None) or 0.0
                for preset, tol in TOLS.items():
                    t = tol or DEFAULT_TOLERANCES.get(str(e.dtype).replace("torch.", ""), 1e-4)
                    for rule in RULES:
                        key = f"{preset}/{rule}/{dist}"
                        m = _margin(e, g, t, rule, noise, rounding)
                        row["margins"][key] = max(row["margins"].get(key, 0.0), m)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seeds", type=int, default=2, help="hidden seeds per distribution")
    ap.add_argument("--distributions", default="native,heavy,shifted,scaled")
    ap.add_argument("--only", default="", help="substring of the case names to keep")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.distributions = args.distributions.split(",")
    import json

    store = ReferenceStore()
    rows = []
    t0 = time.monotonic()
    for name, problem, source in honest_cases():
        if args.only and args.only not in name:
            continue
        rows.append(measure(name, problem, source, args, store))
        worst = max(rows[-1]["margins"].items(), key=lambda kv: kv[1], default=("-", 0.0))
        print(f"{name}: worst {worst[0]} {worst[1]:.3g} {rows[-1]['errors'][:1]}", flush=True)
    summary = {
        key: max((r["margins"].get(key, 0.0) for r in rows), default=0.0)
        for key in sorted({k for r in rows for k in r["margins"]})
    }
    over = {k: [r["case"] for r in rows if r["margins"].get(k, 0.0) > 1.0] for k in summary}
    doc = {
        "command": " ".join(["python", *sys.argv]),
        "date": time.strftime("%Y-%m-%d"),
        "device": args.device,
        "wall_s": round(time.monotonic() - t0, 1),
        "worst_margin": summary,
        "failing": {k: v for k, v in over.items() if v},
        "rows": rows,
    }
    args.out.write_text(json.dumps(doc, indent=1))
    print(json.dumps({"worst_margin": summary, "failing": doc["failing"]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
