"""Pieces of benchmarks/train_step.py: model shapes, batches, FLOP accounting, timing, guards.

FLOPs of one training step (forward + backward) over `tokens` input positions:
  dense  = 6 * N * tokens, N = every parameter once (the tied embedding counts once: it is the
           lm-head matmul; the embedding lookup is not a matmul)
  attn   = 6 * L * s * (heads * head_dim) * tokens for causal attention within samples of s
           tokens: QK^T and PV are 2 * 2 * s * d per token forward at full length, halved by the
           causal mask, x3 for forward + backward
  mfu    = dense / step_s / peak;  mfu_with_attention = (dense + attn) / step_s / peak
with peak = 989e12 FLOP/s (H100/H200 SXM dense bf16, the vendor figure). Neither counts the
recompute of activation checkpointing; a matmul rate measured on the device in the same run is
reported beside it (`matmul_tflops`, `mfu_vs_matmul`).
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch

PEAK_BF16 = 989e12

SHAPES: dict[str, dict[str, Any]] = {
    "tiny": dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, intermediate_size=192),
    "tiny2": dict(vocab_size=512, hidden_size=96, num_hidden_layers=3, num_attention_heads=6,
                  num_key_value_heads=2, head_dim=16, intermediate_size=256),
    "0.6b": dict(vocab_size=151936, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, intermediate_size=3072),
    "1.7b": dict(vocab_size=151936, hidden_size=2048, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, intermediate_size=6144),
    "4b": dict(vocab_size=151936, hidden_size=2560, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, intermediate_size=9728),
}  # fmt: skip
TIED = {"tiny": True, "tiny2": False, "0.6b": True, "1.7b": True, "4b": True}


def qwen3_config(shape: str) -> Any:
    from transformers import Qwen3Config

    extra = (
        {} if shape.startswith("tiny") else {"max_position_embeddings": 40960, "rope_theta": 1e6}
    )
    return Qwen3Config(**SHAPES[shape], tie_word_embeddings=TIED[shape], rms_norm_eps=1e-6, **extra)


def trainer_config(args, seq: int, v: dict[str, Any]) -> Any:
    from tritonforge.config.train import TrainerConfig

    return TrainerConfig.model_validate({
        "model": {"dtype": "bf16", "master_fp32": v.get("master", True),
                  "master_weights": v.get("where", "params"),
                  "gradient_checkpointing": v.get("ckpt") is not None,
                  "checkpoint_layers": v.get("ckpt"), "compile": v.get("compile", "off")},
        "optim": {"lr": 1e-6, "grad_clip": 1.0},
        "batch": {"micro_batch_tokens": v["micro_tokens"], "max_seq_len": seq + 1,
                  "chunk_tokens": v.get("chunk", args.chunk), "packing": v.get("packing", True),
                  "lm_head": v.get("head", "auto"),
                  "attention": v.get("ragged", "auto"), "attention_uniform": v.get("uniform", "auto")},
        "loss": {"type": "grpo"},
        "rl": {"log_entropy": True},
    })  # fmt: skip


def param_dtype_of(v: dict[str, Any]) -> torch.dtype:
    """The parameter dtype a variant's trainer holds: fp32 masters as parameters, else bf16."""
    fp32 = v.get("master", True) and v.get("where", "params") == "params"
    return torch.float32 if fp32 else torch.bfloat16


def count_params(config: Any) -> int:
    from transformers import Qwen3ForCausalLM

    with torch.device("meta"):
        return sum(p.numel() for p in Qwen3ForCausalLM(config).parameters())


def make_model(config: Any, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """A random-init Qwen3 in `dtype`, its rotary frequencies in fp32 as from_pretrained's."""
    from transformers import Qwen3ForCausalLM

    from tritonforge.model_cast import cast_model

    torch.manual_seed(0)
    with torch.device(device):
        lm = Qwen3ForCausalLM(config)
    return cast_model(lm, dtype)


def make_batch(n: int, seq: int, prompt: int, vocab: int) -> list[Any]:
    """n samples of seq + 1 tokens (seq input positions), loss on all but the prompt."""
    from tritonforge.training.batching import TrainSequence

    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        ids = torch.randint(0, vocab, (seq + 1,), generator=g).tolist()
        mask = [0] * prompt + [1] * (seq + 1 - prompt)
        adv = 1.0 if i % 2 else -1.0
        out.append(
            TrainSequence(ids, mask, [adv * m for m in mask], [-1.0 * m for m in mask], 0, i)
        )
    return out


def flops(config: Any, params: int, seq: int, tokens: int) -> tuple[float, float]:
    """(dense, attention) FLOPs of one step; see the module docstring."""
    width = config.num_attention_heads * config.head_dim
    return 6.0 * params * tokens, 6.0 * config.num_hidden_layers * seq * width * tokens


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def reset_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device: torch.device) -> float | None:
    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.type == "cuda" else None


def matmul_tflops(device: torch.device) -> float | None:
    """bf16 8192^3 matmul rate on this device (mean of 10 after 3 warm-ups), TFLOP/s."""
    if device.type != "cuda":
        return None
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(device)
    t0 = time.perf_counter()
    for _ in range(10):
        a @ b
    sync(device)
    return round(2 * 8192**3 * 10 / (time.perf_counter() - t0) / 1e12, 1)


def time_steps(step: Callable[[], Any], device, warmup: int, steps: int, deadline: float) -> dict:
    """Run `step` warmup + steps times (fewer when past `deadline`, but at least one timed
    step: the first may spend most of the time compiling); times of the timed ones."""
    times, first, out = [], None, None
    for i in range(warmup + steps):
        if i > warmup and time.monotonic() > deadline:
            break
        sync(device)
        t0 = time.perf_counter()
        out = step()
        sync(device)
        dt = time.perf_counter() - t0
        if i == 0:
            first = dt
        if i >= warmup:
            times.append(dt)
    return {"times": times, "first_step_s": round(first or 0.0, 2), "last": out}


def host_prep_ms(trainer: Any, batch: list[Any], repeats: int = 3) -> float:
    """Median host time of what a step does before its first kernel: the sequences checked
    and packed into micro-batches (nothing moves to the device). The benchmark syncs before
    each step, so the device idles for this long at the start of every timed step."""
    from tritonforge.training.batching import prepare_sequences

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        seqs, _ = prepare_sequences(batch, trainer.cfg.batch)
        trainer.core.micro_batches(seqs)
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1e3, 2)


def summarize(times: list[float], tokens: int, fl: tuple[float, float], peaks: dict) -> dict:
    if not times:
        return {"status": "no_timed_steps"}
    t = statistics.median(times)
    dense, attn = fl
    out = {
        "status": "ok",
        "step_s": round(t, 4),
        "step_s_all": [round(x, 4) for x in times],
        "tokens_per_s": round(tokens / t, 1),
        "mfu": round(dense / t / PEAK_BF16, 4),
        "mfu_with_attention": round((dense + attn) / t / PEAK_BF16, 4),
    }
    if peaks.get("matmul_tflops"):
        out["mfu_vs_matmul"] = round((dense + attn) / t / (peaks["matmul_tflops"] * 1e12), 4)
    return out


def guarded(fn: Callable[..., dict], *args: Any) -> dict:
    """fn's result; an OOM or any other error becomes a result with status and traceback."""
    try:
        return fn(*args)
    except torch.cuda.OutOfMemoryError as exc:
        return {"status": "oom", "error": str(exc).splitlines()[0][:400]}
    except Exception as exc:  # a benchmark reports every failure and goes on
        status = "oom" if "out of memory" in str(exc).lower() else "error"
        return {
            "status": status,
            "error": f"{type(exc).__name__}: {str(exc)[:600]}",
            "traceback": traceback.format_exc()[-3000:],
        }


def reset_dynamo() -> None:
    """Forget compiled graphs and dynamic-shape decisions (and the counters)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()


def dynamo_counters() -> dict[str, Any]:
    """Graphs compiled, recompiles and graph breaks so far (torch._dynamo counters)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return {}
    breaks = dict(counters.get("graph_break", {}))
    return {
        "unique_graphs": counters["stats"].get("unique_graphs", 0),
        "calls_captured": counters["stats"].get("calls_captured", 0),
        "graph_breaks": sum(breaks.values()),
        "graph_break_reasons": [k[:200] for k in list(breaks)[:8]],
    }


@contextlib.contextmanager
def profiled(enabled: bool, device: torch.device, path: Any) -> Iterator[None]:
    """torch.profiler around the block; writes the top kernels by device time to `path`."""
    if not enabled:
        yield
        return
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        yield
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=key, row_limit=30, max_name_column_width=70)
    path.write_text(table + "\n")
    print(table, flush=True)
