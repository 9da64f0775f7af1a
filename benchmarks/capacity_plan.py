"""Capacity plan of the RL loop for 8..128 GPUs: step time, pool utilisation, bottleneck, best split.

A model of one RL step from measured per-component figures:
- evaluation: evals/min per GPU of the evaluation server (docs/bench/h200_eval_server.json:
  server.evals_per_min at workers_per_device workers on one H200), as workers_per_device slots
  per GPU, each busy workers/(evals_per_min/60) s per evaluation (gamma-distributed, cv 0.5);
- training: tokens/s per GPU of the trainer (docs/bench/h200_train_step.json:
  results.trainer_micro1, Qwen3-0.6B-shaped, 8 x 8192 tokens, bf16) times a data-parallel
  efficiency (1 within a node of 8, `multi_node_eff` beyond: an assumption);
- generation: NOT measured (no vLLM/SGLang on the GPU box): aggregate decode tokens/s per GPU and
  a per-sequence cap are parameters (defaults 20k and 250 tok/s: assumptions for a 0.6B model
  under vLLM at large batch) and the plan prints a sensitivity sweep over them;
- weight sync: seconds per push (default 2 s: assumption; colocated in-memory 1 s).

Workload: problems x group samples per step, up to `turns` turns (a turn after the first happens
with probability 1 - p_stop), generated tokens per turn (gamma, cv 0.5), one evaluation per
turn; trained tokens per sample = prompt + turns x (generated + feedback).

Rollouts are a discrete-event simulation: generation is processor sharing over the inference
GPUs (every live sequence decodes at min(cap, pool tokens/s / live sequences)), evaluation a FIFO
queue over the evaluation slots, each sample alternating generate -> evaluate up to its turns.
Training and weight sync are analytic. Schedules: disaggregated sync (rollout + train + sync),
disaggregated async (one-step off-policy: max(rollout, train + sync)), colocated sync (trainer
and inference share GPUs: rollout + switch + train + sync). The best split per cluster size is
searched over a geometric grid of splits, then by moving GPUs between pools while the simulated
step time improves.

    python benchmarks/capacity_plan.py                # JSON
    python benchmarks/capacity_plan.py --md           # + markdown tables
    python benchmarks/capacity_plan.py --gen-tps 40000 --sizes 8,16,32,64,128
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
from collections import deque
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[1] / "docs" / "bench"


@dataclass(frozen=True)
class Figures:
    """Per-component throughput (per GPU) and fixed costs."""

    eval_per_min: float = 53.9  # evaluations/min per GPU (measured, H200)
    eval_slots: int = 6  # evaluation workers per GPU at that rate
    train_tps: float = 24352.4  # trained tokens/s per GPU (measured, H200, 0.6B)
    gen_tps: float = 20000.0  # decode tokens/s per GPU (assumption)
    gen_seq_cap: float = 250.0  # decode tokens/s of one sequence (assumption)
    sync_s: float = 2.0  # weight push, disaggregated (assumption)
    colocated_sync_s: float = 1.0  # in-memory push, colocated (assumption)
    switch_s: float = 4.0  # colocated: offload/onload trainer <-> engine per step (assumption)
    multi_node_eff: float = 0.85  # FSDP data-parallel efficiency beyond 8 GPUs (assumption)
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class Workload:
    problems: int = 32
    group: int = 8
    turns: int = 3
    p_stop: float = 0.15  # early stop (correct) after a turn
    gen_tokens: float = 2048.0  # generated per turn (mean)
    len_cv: float = 0.5
    prompt_tokens: float = 1500.0
    feedback_tokens: float = 300.0
    eval_cv: float = 0.5
    seed: int = 0

    @property
    def samples(self) -> int:
        return self.problems * self.group

    def mean_turns(self) -> float:
        return sum((1 - self.p_stop) ** k for k in range(self.turns))


def load_figures(bench: Path = BENCH) -> Figures:
    """Defaults from docs/bench where the files exist (others stay assumptions)."""
    f, src = Figures(), []
    ev = bench / "h200_eval_server.json"
    if ev.is_file():
        d = json.loads(ev.read_text())
        f = replace(
            f,
            eval_per_min=float(d["server"]["evals_per_min"]),
            eval_slots=int(d["workers_per_device"]),
        )
        src.append(f"{ev.name}: server.evals_per_min, workers_per_device")
    tr = bench / "h200_train_step.json"
    if tr.is_file():
        d = json.loads(tr.read_text())
        f = replace(f, train_tps=float(d["results"]["trainer_micro1"]["tokens_per_s"]))
        src.append(f"{tr.name}: results.trainer_micro1.tokens_per_s")
    return replace(f, sources=tuple(src))


# ---------------------------------------------------------------------------- the simulation


def _gamma(rng: random.Random, mean: float, cv: float) -> float:
    if cv <= 0:
        return mean
    k = 1.0 / (cv * cv)
    return rng.gammavariate(k, mean / k)


def draw_samples(w: Workload) -> list[tuple[list[float], list[float]]]:
    """Per sample: generated tokens of each turn it plays, and its evaluations' work units."""
    rng = random.Random(w.seed)
    out = []
    for _ in range(w.samples):
        n = 1
        while n < w.turns and rng.random() >= w.p_stop:
            n += 1
        gens = [max(16.0, _gamma(rng, w.gen_tokens, w.len_cv)) for _ in range(n)]
        evals = [_gamma(rng, 1.0, w.eval_cv) for _ in range(n)]  # x mean service time
        out.append((gens, evals))
    return out


def simulate_rollout(
    samples: list[tuple[list[float], list[float]]], infer_gpus: int, eval_gpus: int, f: Figures
) -> dict[str, float]:
    """Event simulation of one batch of rollouts; time until the last sample's last verdict."""
    pool_tps, cap = infer_gpus * f.gen_tps, f.gen_seq_cap
    slots = max(1, eval_gpus * f.eval_slots)
    service = f.eval_slots * 60.0 / f.eval_per_min  # s per evaluation on one slot
    t, vtime = 0.0, 0.0  # wall clock; tokens delivered to every live sequence so far
    gen_heap: list[tuple[float, int]] = []  # (virtual finish, sample)
    eval_heap: list[tuple[float, int]] = []  # (finish time, sample)
    queue: deque[int] = deque()
    turn = [0] * len(samples)
    busy_slots, gen_tokens, eval_busy = 0, 0.0, 0.0
    for s, (gens, _) in enumerate(samples):
        heapq.heappush(gen_heap, (gens[0], s))
    done = 0
    while done < len(samples):
        n = len(gen_heap)
        rate = min(cap, pool_tps / n) if n else 0.0
        t_gen = t + (gen_heap[0][0] - vtime) / rate if n else math.inf
        t_eval = eval_heap[0][0] if eval_heap else math.inf
        t_next = min(t_gen, t_eval)
        vtime += rate * (t_next - t)
        gen_tokens += rate * n * (t_next - t)
        t = t_next
        if t_gen <= t_eval:
            _, s = heapq.heappop(gen_heap)
            queue.append(s)
        else:
            _, s = heapq.heappop(eval_heap)
            busy_slots -= 1
            turn[s] += 1
            gens, _ = samples[s]
            if turn[s] < len(gens):
                heapq.heappush(gen_heap, (vtime + gens[turn[s]], s))
            else:
                done += 1
        while queue and busy_slots < slots:
            s = queue.popleft()
            work = service * samples[s][1][turn[s]]
            eval_busy += work
            heapq.heappush(eval_heap, (t + work, s))
            busy_slots += 1
    return {
        "rollout_s": t,
        "gen_util": gen_tokens / (pool_tps * t) if t else 0.0,
        "eval_util": eval_busy / (slots * t) if t else 0.0,
    }


def train_seconds(
    samples: list[tuple[list[float], list[float]]], w: Workload, gpus: int, f: Figures
) -> float:
    tokens = sum(w.prompt_tokens + sum(g + w.feedback_tokens for g in gens) for gens, _ in samples)
    eff = 1.0 if gpus <= 8 else f.multi_node_eff
    return tokens / (gpus * f.train_tps * eff)


# ---------------------------------------------------------------------------- plans


def evaluate_split(
    mode: str, split: tuple[int, int, int], samples: list, w: Workload, f: Figures
) -> dict[str, Any]:
    """Step time and utilisation of (trainer, inference, eval) GPUs; colocated: trainer = inference."""
    g_t, g_i, g_e = split
    roll = simulate_rollout(samples, g_i, g_e, f)
    train = train_seconds(samples, w, g_t, f)
    if mode == "colocated":
        step = roll["rollout_s"] + f.switch_s + train + f.colocated_sync_s
        busy_shared = roll["gen_util"] * roll["rollout_s"] + train
        util = {
            "trainer+infer": busy_shared / step,
            "eval": roll["eval_util"] * roll["rollout_s"] / step,
        }
    else:
        sync = f.sync_s
        step = (
            roll["rollout_s"] + train + sync
            if mode == "sync"
            else max(roll["rollout_s"], train + sync)
        )
        util = {
            "trainer": train / step,
            "infer": roll["gen_util"] * roll["rollout_s"] / step,
            "eval": roll["eval_util"] * roll["rollout_s"] / step,
        }
    floor = _latency_floor(samples, f)
    bottleneck = max(util, key=util.get)
    if roll["rollout_s"] < 1.25 * floor and util[bottleneck] < 0.6:
        bottleneck = "latency"  # the turn chain (decode + evaluate), not any pool, sets the pace
    return {
        "mode": mode,
        "gpus": g_t + g_i + g_e if mode != "colocated" else g_t + g_e,
        "split": {"trainer": g_t, "infer": g_i, "eval": g_e},
        "step_s": round(step, 1),
        "rollout_s": round(roll["rollout_s"], 1),
        "train_s": round(train, 1),
        "latency_floor_s": round(floor, 1),
        "util": {k: round(v, 3) for k, v in util.items()},
        "bottleneck": bottleneck,
        "samples_per_hour": round(w.samples * 3600 / step),
    }


def _latency_floor(samples: list, f: Figures) -> float:
    """The slowest sample's chain with infinite GPUs: its decode at the cap + its evaluations."""
    service = f.eval_slots * 60.0 / f.eval_per_min
    return max(sum(g / f.gen_seq_cap for g in gens) + service * sum(ev) for gens, ev in samples)


GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)


def candidate_splits(mode: str, n: int) -> list[tuple[int, int, int]]:
    """A geometric grid of splits of n GPUs (colocated: shared GPUs, the rest evaluate)."""
    grid = [g for g in GRID if g < n]
    if mode == "colocated":
        return [(c, c, n - c) for c in grid]
    return [(t, i, n - t - i) for t in grid for i in grid if t + i < n]


def _neighbours(mode: str, n: int, split: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """Moves of 1..n/8 GPUs between two pools (the split stays valid)."""
    t, i, e = split
    out = []
    for d in sorted({1, 2, max(1, n // 16), max(1, n // 8)}):
        if mode == "colocated":
            out += [(t + s, i + s, e - s) for s in (d, -d)]
        else:
            out += [
                (t + d, i - d, e), (t - d, i + d, e), (t + d, i, e - d),
                (t - d, i, e + d), (t, i + d, e - d), (t, i - d, e + d),
            ]  # fmt: skip
    return [s for s in out if min(s) >= 1]


def best_split(mode: str, n: int, samples: list, w: Workload, f: Figures) -> dict[str, Any]:
    """Grid search, then hill-climbing moves between pools, each split simulated."""
    seen: dict[tuple[int, int, int], dict[str, Any]] = {}

    def run(s: tuple[int, int, int]) -> dict[str, Any]:
        if s not in seen:
            seen[s] = evaluate_split(mode, s, samples, w, f)
        return seen[s]

    best = min((run(s) for s in candidate_splits(mode, n)), key=lambda r: r["step_s"])
    improved = True
    while improved:
        improved = False
        cur = best["split"]
        for s in _neighbours(mode, n, (cur["trainer"], cur["infer"], cur["eval"])):
            r = run(s)
            if r["step_s"] < best["step_s"]:
                best, improved = r, True
    return {**best, "splits_simulated": len(seen)}


def fixed_ratio(n: int) -> tuple[int, int, int]:
    """The reference node's 4 trainer + 2 inference + 2 eval split, scaled to n GPUs."""
    t, i = n // 2, n // 4
    return (t, i, n - t - i)


def plan(sizes: list[int], w: Workload, f: Figures, weak: bool) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    ratio: list[dict[str, Any]] = []
    for n in sizes:
        wn = replace(w, problems=max(1, w.problems * n // sizes[0])) if weak else w
        samples = draw_samples(wn)
        for mode in ("sync", "async", "colocated"):
            rows.append({"size": n, "samples": wn.samples, **best_split(mode, n, samples, wn, f)})
        ratio.append(
            {
                "size": n,
                "samples": wn.samples,
                **evaluate_split("sync", fixed_ratio(n), samples, wn, f),
            }
        )
    return {"best": rows, "fixed_4_2_2": ratio}


def sensitivity(sizes: list[int], base: int, w: Workload, f: Figures) -> list[dict[str, Any]]:
    """Best async split as the (unmeasured) generation figures vary (weak-scaled workload)."""
    out = []
    for n in sizes:
        wn = replace(w, problems=max(1, w.problems * n // base))
        samples = draw_samples(wn)
        for tps in (5000.0, 10000.0, 20000.0, 40000.0, 80000.0):
            for cap in (125.0, 250.0, 500.0):
                r = best_split("async", n, samples, wn, replace(f, gen_tps=tps, gen_seq_cap=cap))
                out.append(
                    {"size": n, "samples": wn.samples, "gen_tps": tps, "gen_seq_cap": cap, **r}
                )
    return out


# ---------------------------------------------------------------------------- output


def _md_rows(rows: list[dict[str, Any]]) -> list[str]:
    out = [
        "| GPUs | samples/step | schedule | trainer/infer/eval | step s | rollout s | train s | floor s | util (pools) | bottleneck |",
        "|---:|---:|---|---|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        sp = r["split"]
        util = ", ".join(f"{k} {v:.2f}" for k, v in r["util"].items())
        out.append(
            f"| {r['size']} | {r['samples']} | {r['mode']} | {sp['trainer']}/{sp['infer']}/{sp['eval']} "
            f"| {r['step_s']} | {r['rollout_s']} | {r['train_s']} | {r['latency_floor_s']} | {util} | {r['bottleneck']} |"
        )
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = []
    for scaling in ("strong", "weak"):
        part = result[scaling]
        lines += [f"### {scaling} scaling: best split per size", "", *_md_rows(part["best"]), ""]
        lines += [
            f"### {scaling} scaling: the 4/2/2 node ratio scaled up (sync)",
            "",
            *_md_rows(part["fixed_4_2_2"]),
            "",
        ]
    lines += ["### sensitivity: generation throughput (async, best split)", ""]
    lines += [
        "| GPUs | samples/step | gen tok/s/GPU | seq cap tok/s | trainer/infer/eval | step s | util (pools) | bottleneck |",
        "|---:|---:|---:|---:|---|---:|---|---|",
    ]
    for r in result["sensitivity"]:
        sp = r["split"]
        util = ", ".join(f"{k} {v:.2f}" for k, v in r["util"].items())
        lines.append(
            f"| {r['size']} | {r['samples']} | {r['gen_tps']:.0f} | {r['gen_seq_cap']:.0f} "
            f"| {sp['trainer']}/{sp['infer']}/{sp['eval']} | {r['step_s']} | {util} | {r['bottleneck']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="8,16,32,64,128", help="cluster sizes (GPUs)")
    ap.add_argument("--md", action="store_true", help="also print markdown tables")
    ap.add_argument("--gen-tps", type=float, help="decode tokens/s per GPU (assumption)")
    ap.add_argument("--gen-seq-cap", type=float, help="decode tokens/s of one sequence")
    ap.add_argument("--sync-s", type=float, help="weight push seconds")
    ap.add_argument(
        "--problems", type=int, default=32, help="problems per step (at the smallest size)"
    )
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--gen-tokens", type=float, default=2048.0)
    ap.add_argument("--sensitivity-sizes", default="8,64", help="sizes of the generation sweep")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args(argv)
    f = load_figures()
    over = {"gen_tps": args.gen_tps, "gen_seq_cap": args.gen_seq_cap, "sync_s": args.sync_s}
    f = replace(f, **{k: v for k, v in over.items() if v is not None})
    w = Workload(
        problems=args.problems, group=args.group, turns=args.turns, gen_tokens=args.gen_tokens
    )
    sizes = [int(x) for x in args.sizes.split(",")]
    result = {
        "benchmark": "capacity_plan",
        "figures": asdict(f),
        "workload": {**asdict(w), "samples": w.samples, "mean_turns": round(w.mean_turns(), 3)},
        "strong": plan(sizes, w, f, weak=False),
        "weak": plan(sizes, w, f, weak=True),
        "sensitivity": sensitivity(
            [int(x) for x in args.sensitivity_sizes.split(",")], sizes[0], w, f
        ),
    }
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    if args.md:
        print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
