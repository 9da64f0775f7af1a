"""The closed RL loop on one device: generate, judge, train, sync; where each step's time goes.

Runs `tritonforge train`'s loop (training.loop.run_training) on configs/single-gpu.toml with the
overrides of each part below, offline (HF_HUB_OFFLINE=1), and writes one JSON (default
docs/bench/h200_rl_loop.json) whose top level holds the first part's figures (issue 33):
  steps, gpu_busy_fraction (goal >= 0.70 in the async schedule), step_over_slowest_stage (a
  step's wall over its slowest stage alone, median; goal <= 1.3), pass_rate and mean_reward
  ({"before": .., "after": ..}, measured on the same seeds), per_step (each step's split:
  wall, generate, judge with its queue / correctness / timing, train, sync, idle, GPU busy,
  generation tokens/s, verdicts/min, memory peaks; definitions in training/accounting.py)
and every part under `parts`:
- tiny: the tiny policy after the demo's SFT (offline model tiny-sft, built on the device first,
  or a carried folder: --tiny-policy) on the variants suite's rl problems at gpu sizes, judged
  and timed on the same GPU, async schedule, --steps steps, before/after on the same seeds;
- shape: the config's own policy offline, i.e. its offline_fallback (the Qwen3-0.6B-shaped
  random model) on KernelBench level 1 at original sizes, one step with 512-token answers: what
  a step costs at that shape (its answers hold no code, so the judge only does static checks).
Aggregates leave out the first step when there are several (training.accounting.aggregate).
A call with some --parts keeps the other parts of an existing --out of the same mode, so the
parts can run in separate (time-limited) calls.
--small runs the same code on the CPU (a tiny model, the Triton interpreter, cpu sizes, nothing
timed) for tests, and refuses an --out under docs/bench/: CPU figures are not H200 figures.

Usage, from the repository root (the GPU machine without network: docs/gpu.md):
  python3 benchmarks/rl_loop.py [--tiny-policy DIR] [--steps 3] [--parts tiny,shape]
  python3 benchmarks/rl_loop.py --small --out runs/rl_loop_small.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from bench_common import environment, known_names

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "single-gpu.toml"
DEFAULT_OUT = REPO / "docs" / "bench" / "h200_rl_loop.json"
PARTS = ("tiny", "shape")
STEP_KEYS = (
    "wall_s", "generate_s", "judge_s", "judge_queue_s", "judge_correctness_s", "judge_timing_s",
    "judge_unsplit_s",
    "train_s", "sync_s", "idle_s", "busy_s", "slowest_stage_s", "wall_over_slowest",
    "gen_tokens", "gen_tokens_per_s", "verdicts", "verdicts_per_min", "gpu_busy",
    "device_mem_peak_gib", "gpu_mem_peak_gib", "host_rss_gib", "gate_wait_s", "time_s",
    "reward", "pass", "speedup", "repair", "stale_dropped", "staleness_max",
)  # fmt: skip


def q(value: Any) -> str:
    """A value as an override's TOML text."""
    return json.dumps(value)


def common(args: argparse.Namespace, name: str) -> list[str]:
    out = [
        f"run_dir={q(str(args.work / name))}",
        "trainer.logging.progress=false",
        "trainer.checkpoint.save_final=false",
        "trainer.model.compile=off",  # a few steps cannot pay for compiling
        "buffer.filter='none'",
    ]
    if args.small:  # the CPU: fp32, the interpreter, nothing timed
        out += [
            "engine.device='cpu'", "engine.dtype='float32'", "trainer.model.dtype='fp32'",
            "trainer.model.gradient_checkpointing=false", "eval.settings.device='cpu'",
            "eval.settings.measure_performance=false", "eval.concurrency=2",
            "engine.max_batch_size=16",
        ]  # fmt: skip
    return out


def tiny_overrides(args: argparse.Namespace, policy: str) -> list[str]:
    size = "cpu" if args.small else "gpu"
    tokens = args.max_new_tokens or (400 if not args.small else 300)
    limit = ", limit = 3" if args.small else ""  # the CPU: three problems, measured and trained
    return [
        *common(args, "tiny"),
        f"trainer.model.path={q(policy)}", f"engine.model_path={q(policy)}",
        f"problems={{suite = 'variants', category = 'rl', size = '{size}'{limit}}}",
        f"steps={args.steps}", f"problems_per_step={2 if args.small else 4}",
        f"buffer.group_size={2 if args.small else 4}",
        "task.prompt.include_example=false", "task.prompt.system_template='system_compact'",
        "agent.max_turns=2", "agent.max_context_tokens=2048",
        f"agent.sampling.max_new_tokens={tokens}",
        "agent.sampling.temperature=0.7", "trainer.rl.temperature=0.7",
        "trainer.optim.lr=6e-5", "trainer.optim.schedule='constant'",
        "trainer.optim.warmup_steps=0",
        f"evaluate.samples={1 if args.small else 2}", "evaluate.seed=1234",
    ]  # fmt: skip


def shape_overrides(args: argparse.Namespace) -> list[str]:
    out = [
        *common(args, "shape"),
        "steps=1", "problems_per_step=2", "buffer.group_size=4", "agent.max_turns=1",
        f"agent.sampling.max_new_tokens={64 if args.small else 512}", "evaluate.enabled=false",
    ]  # fmt: skip
    if args.small:  # the tiny model stands in for the 0.6B shape; a built-in problem for KB
        out += [
            "offline_fallback='tiny'",
            "problems={suite = 'builtin', size = 'cpu', ids = ['relu']}",
        ]
    return out


def tiny_policy(args: argparse.Namespace) -> str:
    """The tiny part's policy: a carried folder, else an offline model built here."""
    if args.tiny_policy:
        return str(args.tiny_policy)
    from tritonforge.training.offline_models import ensure_offline_model

    return str(ensure_offline_model("tiny" if args.small else "tiny-sft").resolve())


def run_part(name: str, overrides: list[str]) -> dict[str, Any]:
    from tritonforge.config import load_config
    from tritonforge.config.run import TrainRunConfig
    from tritonforge.plan.runs import resolve_train
    from tritonforge.training.loop import run_training
    from tritonforge.training.report import write_report

    plan = resolve_train(load_config(TrainRunConfig, CONFIG, overrides))
    shutil.rmtree(plan.run_dir, ignore_errors=True)  # a fresh run, not a resumed one
    t0 = time.monotonic()
    summary = asyncio.run(run_training(plan))
    wall = time.monotonic() - t0
    try:  # the per-step plots (`tritonforge report RUN_DIR`)
        report = str(write_report(plan.run_dir))
    except ImportError as exc:  # no matplotlib on this machine: plot where there is one
        report = f"not written ({exc}): `tritonforge report {plan.run_dir}` elsewhere"
    lines = (plan.run_dir / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines if x.strip()]
    before = (summary.get("before") or {}).get("overall") or {}
    after = (summary.get("after") or {}).get("overall") or {}
    acc = summary.get("accounting") or {}
    cfg = plan.config
    return {
        "steps": len(rows),
        "gpu_busy_fraction": acc.get("gpu_busy_fraction"),
        "gpu_busy_reason": acc.get("gpu_busy_reason"),
        "step_over_slowest_stage": acc.get("step_over_slowest_stage"),
        "pass_rate": {"before": before.get("pass_rate"), "after": after.get("pass_rate")},
        "mean_reward": {"before": before.get("mean_reward"), "after": after.get("mean_reward")},
        "per_step": [{"step": r["step"], **{k: r[k] for k in STEP_KEYS if k in r}} for r in rows],
        "accounting": acc,
        "policy": summary.get("policy"),
        "problems": cfg.problems.model_dump(exclude_defaults=True),
        "schedule": cfg.schedule.model_dump(),
        "engine": {"device": cfg.engine.device, "dtype": cfg.engine.dtype,
                   "pause_mode": cfg.engine.pause_mode},
        "judge": {"device": cfg.eval.settings.device, "timed": cfg.eval.settings.measure_performance,
                  "concurrency": cfg.eval.concurrency},
        "overrides": overrides,
        "report": report,
        "part_wall_s": round(wall, 1),
    }  # fmt: skip


def write(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    os.replace(tmp, args.out)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="CPU mode (tests): no H200 figures")
    ap.add_argument("--out", type=Path, default=None, help=f"JSON (default {DEFAULT_OUT})")
    ap.add_argument("--work", type=Path, default=Path("runs/rl_loop"), help="runs go here")
    ap.add_argument("--parts", default=",".join(PARTS), help="tiny,shape (first: top level)")
    ap.add_argument("--steps", type=int, default=None, help="tiny part's steps (3; small 2)")
    ap.add_argument("--tiny-policy", type=Path, default=None, help="carried tiny policy folder")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="tiny part's answers")
    args = ap.parse_args(argv)
    args.parts = known_names(ap, "--parts", args.parts, PARTS)
    args.steps = args.steps or (2 if args.small else 3)
    args.out = (args.out or DEFAULT_OUT).resolve()
    if args.small and (REPO / "docs" / "bench") in args.out.parents:
        ap.error("--small writes CPU figures: give an --out outside docs/bench/")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the lent GPU machines have no network
    import torch

    if not args.small and not torch.cuda.is_available():
        print("rl_loop: no CUDA device; run with --small on a CPU", file=sys.stderr)
        return 2
    device = "cpu" if args.small else "cuda:0"
    mode = "small (CPU)" if args.small else "gpu"
    doc = json.loads(args.out.read_text()) if args.out.is_file() else {}
    if doc.get("mode") != mode:  # parts of an earlier call of this mode are kept
        doc = {}
    doc.update({
        "benchmark": "rl_loop", "mode": mode, "environment": environment(device),
        "config": "configs/single-gpu.toml",
    })  # fmt: skip
    doc.setdefault("commands", []).append(" ".join(sys.argv))
    for name in args.parts:
        over = tiny_overrides(args, tiny_policy(args)) if name == "tiny" else shape_overrides(args)
        doc.setdefault("parts", {})[name] = run_part(name, over)
        top = doc["parts"].get("tiny") or doc["parts"][name]  # the top level: the tiny part's
        keys = ("steps", "gpu_busy_fraction", "gpu_busy_reason", "step_over_slowest_stage",
                "pass_rate", "mean_reward", "per_step")  # fmt: skip
        doc.update({k: top[k] for k in keys})
        write(args, doc)  # after every part: a run cut short keeps what it measured
    print(json.dumps({k: doc.get(k) for k in ("steps", "gpu_busy_fraction",
                      "step_over_slowest_stage", "pass_rate")}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
