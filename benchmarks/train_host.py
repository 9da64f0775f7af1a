"""Host-side cost of one GRPO step on the CPU: operators dispatched and batch preparation.

A proxy for launch overhead on the GPU, measured without one: a model with the 0.6B shape's
28 layers but tiny widths (hidden 64, vocab 4096), 8 samples of `--seq` tokens, eager (every
dispatched aten operator is one kernel launch on a GPU; compiled layers fuse the elementwise
ones, so these counts are upper bounds), in two trainer configurations:
  round1     fp32 parameters under bf16 autocast, 2 samples per micro-batch (4 micro-batches)
  this       bf16 parameters with fp32 masters in the optimizer, one micro-batch per step
and the host time of building the micro-batches of the 0.6B benchmark's batch (8 x 8192).

    python3 benchmarks/train_host.py            # prints one JSON object
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import train_parts as tp

CONFIGS = {
    "round1": {"where": "params", "samples_per_micro": 2},
    "this": {"where": "optimizer", "samples_per_micro": 8},
}


def ops_per_step(name: str, seq: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    from tritonforge.training.rl import RLTrainer

    c = CONFIGS[name]
    shape = {**tp.SHAPES["tiny"], "num_hidden_layers": 28, "vocab_size": 4096}
    tp.SHAPES["tiny28"], tp.TIED["tiny28"] = shape, True
    config = tp.qwen3_config("tiny28")
    v = {"where": c["where"], "micro_tokens": c["samples_per_micro"] * seq, "compile": "off",
         "chunk": 2 * seq, "head": "eager"}  # fmt: skip
    args = argparse.Namespace(chunk=2 * seq)
    trainer = RLTrainer(tp.trainer_config(args, seq, v), model=tp.make_model(config, "cpu",
                        tp.param_dtype_of(v)))  # fmt: skip
    batch = tp.make_batch(8, seq, seq // 16, config.vocab_size)
    trainer.train_step(batch)  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        trainer.train_step(batch)
        wall = time.perf_counter() - t0
    top = [e for e in prof.events() if e.name.startswith("aten::") and _top_level(e)]
    return {"aten_ops_per_step": len(top), "wall_s_profiled": round(wall, 3)}


def _top_level(event) -> bool:
    """An aten op not called from inside another aten op (what a GPU would launch for)."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True


def prep_ms(micro_tokens: int, repeats: int = 5) -> float:
    """Median host time to prepare and pack the 0.6B benchmark's batch (8 x 8192 tokens)."""
    from tritonforge.config.train import BatchConfig
    from tritonforge.training.batching import prepare_sequences
    from tritonforge.training.packing import make_packed_micro_batches

    batch = tp.make_batch(8, 8192, 512, 151936)
    cfg = BatchConfig(micro_batch_tokens=micro_tokens, max_seq_len=8193)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        seqs, _ = prepare_sequences(batch, cfg)
        make_packed_micro_batches(seqs, micro_tokens, 0, 64)
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1e3, 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, default=128)
    args = p.parse_args()
    torch.set_num_threads(1)
    out = {name: ops_per_step(name, args.seq) for name in CONFIGS}
    out["prep_ms_0.6b_batch"] = {"micro_16384": prep_ms(16384), "micro_65536": prep_ms(65536)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
