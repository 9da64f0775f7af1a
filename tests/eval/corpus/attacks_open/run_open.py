"""Run the open attacks (manifest.toml here) and print, per case and mode, the verdict today next
to the verdict a correct evaluator gives; timing cases also run with `USE = 0` (the same kernel
without its shortcut) and print both speedups; `sandbox = "rlimits"` cases run in the degraded
sandbox and print what happened to the machine; cases with `presets` (round r2) run under each
named preset's own rules (EvalSettings.from_preset, device cpu) with the corpus's fast budgets. From the repository root:

    PYTHONPATH=$PWD/src .venv/bin/python tests/eval/corpus/attacks_open/run_open.py [FILE ...]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "tests"))

import helpers.hack_corpus as hc  # noqa: E402
from tritonforge.config.eval import EvalSettings  # noqa: E402
from tritonforge.evaluation.judge.evaluator import Evaluator  # noqa: E402


def preset_settings(case: dict[str, Any], preset: str) -> Any:
    """A registered preset's rules (trials, tolerances, mode) with the corpus's fast budgets."""
    s = EvalSettings.from_preset(preset, device="cpu")
    fast = hc.settings_for(case, s.mode)
    s.budgets, s.limits = fast.budgets, fast.limits
    return s


def settings(case: dict[str, Any], mode: str) -> Any:
    if mode.startswith("preset:"):
        return preset_settings(case, mode[len("preset:") :])
    if case.get("timing"):
        s = hc.cpu_timing_settings(mode=mode)
        s.limits.memory_mb = 4096
    else:
        s = hc.settings_for(case, mode)
    for key, value in (case.get("settings_hybrid") or {}).items() if mode == "hybrid" else ():
        setattr(s, key, value)
    if case.get("sandbox") == "rlimits":
        s.sandbox = "rlimits"
    return s


def judge(ev: Evaluator, case: dict[str, Any], mode: str, source: str) -> str:
    watch = hc.MachineWatch()
    try:
        s = settings(case, mode)
        v = ev.evaluate(hc.problem(case["problem"]), watch.render(source), s)
        share = v.audit.custom_share if v.audit is not None else None
        out = f"{v.status.value} rule={v.rule} speedup={v.speedup} share={share}"
        return out + (f" damage={watch.damage()}" if case.get("sandbox") else "")
    finally:
        watch.close()


def main(names: list[str]) -> None:
    with Evaluator(hc.base_settings()) as ev:
        for case in hc.cases("attacks_open"):
            if (names and case["file"] not in names) or case.get("gpu"):
                continue
            modes = [case.get("mode", "strict")] + (["hybrid"] if "hybrid" in case else [])
            if "presets" in case:  # round r2: each preset's own rules
                modes = [f"preset:{p}" for p in case["presets"]]
            for mode in modes:
                want = (case["status"], case["rule"])
                if mode.startswith("preset:"):
                    status, _, rule = case["expected"][mode[len("preset:") :]].partition(":")
                    want = (status, rule)
                if mode == "hybrid" and case.get("hybrid") not in (None, "same"):
                    want = (case["hybrid"], case.get("hybrid_rule", ""))
                print(f"{case['file']} [{mode}] expected {want[0]} rule={want[1] or None}")
                print(f"    now:  {judge(ev, case, mode, case['source'])}")
                if case.get("timing"):
                    plain = case["source"].replace("\nUSE = 1\n", "\nUSE = 0\n")
                    print(f"    USE = 0: {judge(ev, case, mode, plain)}")


if __name__ == "__main__":
    main(sys.argv[1:])
