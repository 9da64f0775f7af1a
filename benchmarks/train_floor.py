"""What the two largest parts of a trainer step could still gain, at the step's exact shapes.

For one model shape (benchmarks/train_parts.py SHAPES) and a batch of `samples` x `seq` tokens
(8 x 8192 as in benchmarks/train_step.py), times forward and backward of:
  - causal attention in every way this torch offers: SDPA with torch's own choice, each SDPA
    kernel forced (cuDNN, flash), grouped-query heads native or repeated, HF's memory layout
    ([B, H, N, D] views of [B, N, H, D], what the trainer passes) and contiguous [B, H, N, D],
    and flex_attention compiled with a causal block mask;
  - the layer's projections as the model runs them (q, k, v separately; gate and up
    separately) and fused into one matmul each (weights concatenated), forward and both
    gradients.
Each figure is the median of `--reps` timed repetitions (CUDA events) after two warm-ups, with
its rate in TFLOP/s (attention: 2 * seq * heads * head_dim FLOPs per token forward, causal;
x2.5 for backward). The "repeated_kv" cases start from keys and values that already have every
query head (the copy that makes them is not timed). Writes a JSON (`--out`); a case that cannot
run here records its error, and a backward that timing noise puts at or below zero has none.

    python3 benchmarks/train_floor.py --shape 0.6b --out OUT/h200_train_floor.json   # GPU
    python3 benchmarks/train_floor.py --tiny --out /tmp/floor.json                   # CPU check

Does not cover: the rest of the step (norms, rotary, SiLU, the lm head, the optimizer; see
benchmarks/train_trace.py for where a whole step's time goes) or kernels this torch lacks
(FlashAttention-3 is not part of torch 2.11).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import train_parts as tp

Tensor = torch.Tensor


def timed(fn: Callable[[], Any], device: torch.device, reps: int) -> float:
    """Median ms of `fn` over `reps` runs after two warm-ups."""
    times = []
    for i in range(reps + 2):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end)
        else:
            t0 = time.perf_counter()
            fn()
            ms = (time.perf_counter() - t0) * 1e3
        if i >= 2:
            times.append(ms)
    return statistics.median(times)


def _qkv(s: int, n: int, heads: int, kv: int, d: int, layout: str, device, dtype) -> list[Tensor]:
    def make(h: int) -> Tensor:
        if layout == "hf":  # [B, H, N, D] views of [B, N, H, D] memory
            x = torch.randn(s, n, h, d, device=device, dtype=dtype).transpose(1, 2)
        else:
            x = torch.randn(s, h, n, d, device=device, dtype=dtype)
        return x.requires_grad_(True)

    return [make(heads), make(kv), make(kv)]


def _sdpa(backend: str | None, gqa: bool) -> Callable[..., Tensor]:
    def call(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        if backend is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([getattr(SDPBackend, backend)]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

    return call


def _flex(n: int, device: torch.device) -> Callable[..., Tensor]:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    mask = create_block_mask(lambda b, h, q, k: q >= k, None, None, n, n, device=str(device))
    compiled = torch.compile(flex_attention)
    return lambda q, k, v: compiled(q, k, v, block_mask=mask, enable_gqa=True)


def attention_cases(device: torch.device) -> list[tuple[str, str, bool, Callable[[], Any]]]:
    """(name, layout, grouped-query heads, factory of the attention call)."""
    cases = [
        ("sdpa_auto", "hf", True, lambda: _sdpa(None, True)),
        ("sdpa_auto", "bhnd", True, lambda: _sdpa(None, True)),
        ("sdpa_auto_repeated_kv", "hf", False, lambda: _sdpa(None, False)),
        ("sdpa_math", "hf", True, lambda: _sdpa("MATH", True)),
    ]
    if device.type == "cuda":
        cases += [
            ("cudnn", "hf", True, lambda: _sdpa("CUDNN_ATTENTION", True)),
            ("cudnn_repeated_kv", "hf", False, lambda: _sdpa("CUDNN_ATTENTION", False)),
            ("flash", "hf", True, lambda: _sdpa("FLASH_ATTENTION", True)),
            ("flex_compiled", "hf", True, None),
        ]
    return cases


def _time_fwd_bwd(call: Callable[..., Tensor], qkv: list[Tensor], device, reps: int):
    """(forward ms, forward + backward ms) of `call` on q, k, v."""
    grad = torch.randn_like(call(*qkv))
    fwd = timed(lambda: call(*qkv), device, reps)
    return fwd, timed(lambda: call(*qkv).backward(grad), device, reps)


def run_attention(args, config: Any, device: torch.device, dtype: torch.dtype) -> dict:
    s, n = args.samples, args.seq
    heads, kv, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    fwd_flops = 2.0 * s * n * n * heads * d  # causal: half of 4 * n^2 * heads * d per sample
    out: dict[str, Any] = {}
    for name, layout, gqa, factory in attention_cases(device):
        key = f"{name}_{layout}"
        if name == "sdpa_math" and n > 2048:
            out[key] = {"status": "skipped", "why": "materializes [n, n] scores"}
            continue
        try:
            call = _flex(n, device) if factory is None else factory()
            qkv = _qkv(s, n, heads, kv if gqa else heads, d, layout, device, dtype)
            fwd, both = _time_fwd_bwd(call, qkv, device, args.reps)
        except Exception as e:  # a kernel this torch or device refuses
            out[key] = {"status": "error", "error": f"{type(e).__name__}: {e}"[:300]}
            continue
        bwd = both - fwd
        out[key] = {"status": "ok", "fwd_ms": round(fwd, 3), "bwd_ms": round(bwd, 3),
                    "fwd_tflops": round(fwd_flops / fwd / 1e9, 1),
                    "bwd_tflops": round(2.5 * fwd_flops / bwd / 1e9, 1) if bwd > 0 else None}  # fmt: skip
        print(json.dumps({key: out[key]}), flush=True)
    return out


def run_projections(args, config: Any, device: torch.device, dtype: torch.dtype) -> dict:
    tokens, hidden, d = args.samples * args.seq, config.hidden_size, config.head_dim
    q_out, kv_out = config.num_attention_heads * d, config.num_key_value_heads * d
    groups = {"qkv": [q_out, kv_out, kv_out], "gate_up": [config.intermediate_size] * 2}
    x = torch.randn(tokens, hidden, device=device, dtype=dtype, requires_grad=True)
    out: dict[str, Any] = {}
    for name, outs in groups.items():
        for how, widths in (("separate", outs), ("fused", [sum(outs)])):
            ws = [torch.randn(w, hidden, device=device, dtype=dtype, requires_grad=True)
                  for w in widths]  # fmt: skip
            gs = [torch.randn(tokens, w, device=device, dtype=dtype) for w in widths]

            def step(ws: list[Tensor] = ws, gs: list[Tensor] = gs) -> None:
                torch.autograd.backward([x @ w.t() for w in ws], gs)

            ms = timed(step, device, args.reps)
            flops = 6.0 * tokens * hidden * sum(widths)
            out[f"{name}_{how}"] = {"ms": round(ms, 3), "tflops": round(flops / ms / 1e9, 1)}
        sep, fused = out[f"{name}_separate"]["ms"], out[f"{name}_fused"]["ms"]
        out[f"{name}_fused_saves_ms_per_layer"] = round(sep - fused, 3)
        out[f"{name}_fused_saves_ms_per_step"] = round((sep - fused) * config.num_hidden_layers, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny shape on CPU (a check of the script)")
    p.add_argument("--shape", default="0.6b", choices=sorted(tp.SHAPES))
    p.add_argument("--samples", type=int, default=None, help="samples per step (default 8)")
    p.add_argument("--seq", type=int, default=None, help="tokens per sample (default 8192)")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    shape = "tiny" if a.tiny else a.shape
    a.samples = a.samples if a.samples is not None else (2 if a.tiny else 8)
    a.seq = a.seq if a.seq is not None else (64 if a.tiny else 8192)
    if a.samples < 1 or a.seq < 2 or a.reps < 1:
        p.error("--samples, --reps must be >= 1 and --seq >= 2")
    device = torch.device("cuda" if torch.cuda.is_available() and not a.tiny else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    config = tp.qwen3_config(shape)
    report: dict[str, Any] = {
        "shape": shape, "samples": a.samples, "seq": a.seq, "reps": a.reps, "device":
        torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "dtype": str(dtype),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
    }  # fmt: skip
    report["attention"] = run_attention(a, config, device, dtype)
    report["projections"] = run_projections(a, config, device, dtype)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["projections"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
