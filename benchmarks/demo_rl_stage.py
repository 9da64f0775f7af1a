"""The RL stage of a finished `tritonforge demo` again, from its SFT model, with overrides.

Reads DEMO_DIR/demo_config.json (the resolved config the demo saved: seeds, SFT model path,
problem sets), applies `key=value` overrides to its `train` section (TrainRunConfig keys, e.g.
`buffer.normalize=zscore_pooled`) and runs it into OUT_DIR: the demo's before/after measurement
and steps, without repeating the tiny model and SFT (about 5 of the demo's 7 minutes on 2 cores).
It is the demo's RL stage: with `buffer.normalize=zscore_pooled_later` every step metric equalled
that of `tritonforge demo --set train.buffer.normalize=zscore_pooled_later`. Prints the RL problems'
and each measured set's before -> after as one JSON document (also OUT_DIR/rl_stage.json).

Usage: python benchmarks/demo_rl_stage.py DEMO_DIR OUT_DIR [key=value ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

KEYS = ("pass_rate", "mean_reward", "repair_rate", "repair_attempts", "first_turn_pass")


def _numbers(block: dict[str, Any]) -> dict[str, float]:
    return {k: round(block["overall"][k], 4) for k in KEYS}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("demo_dir", type=Path)
    p.add_argument("out_dir", type=Path)
    p.add_argument("overrides", nargs="*", help="train-section keys, key=value")
    args = p.parse_args()
    from tritonforge.config import with_overrides
    from tritonforge.config.demo import DemoConfig
    from tritonforge.config.run import TrainRunConfig
    from tritonforge.jobs.loop import run_training
    from tritonforge.plan.runs import resolve_train

    saved = json.loads((args.demo_dir / "demo_config.json").read_text())["train"]
    # the saved file lists the measured sets by name; measure them in the demo's order
    extra = saved["evaluate"]["extra"]
    order = [k for k in DemoConfig().train.evaluate.extra if k in extra]
    saved["evaluate"]["extra"] = {k: extra[k] for k in [*order, *sorted(set(extra) - set(order))]}
    cfg = TrainRunConfig.model_validate(saved)
    cfg = with_overrides(cfg, [f"run_dir={args.out_dir}", *args.overrides])
    summary = asyncio.run(run_training(resolve_train(cfg)))
    doc: dict[str, Any] = {"overrides": args.overrides}
    doc["rl_problems"] = [_numbers(summary["before"]), _numbers(summary["after"])]
    for name, before in summary["before"].get("sets", {}).items():
        doc[name] = [_numbers(before), _numbers(summary["after"]["sets"][name])]
    text = json.dumps(doc, indent=2)
    (args.out_dir / "rl_stage.json").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
