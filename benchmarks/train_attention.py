"""Attention over packed rows for benchmarks/train_step.py: each backend's error and speed.

Every backend of training.attention that can run here is checked against per-sample attention
in fp32 (forward output and the gradients of q, k, v) on a small row, then timed forward +
backward on a row of the benchmark's size (uniform samples, so every backend can run it). The
fastest correct uniform backend and ragged backend are returned as `chosen`.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import train_parts as tp

RAGGED = ("varlen", "flex", "loop")
TOLERANCE = 3e-2  # max |error| / max |reference| in bf16


def _row(lengths: list[int], multiple: int, device: torch.device) -> Any:
    from tritonforge.training.packing import PackedInputs

    total = -(-sum(lengths) // multiple) * multiple
    docs = lengths + ([total - sum(lengths)] if total > sum(lengths) else [])
    cu = torch.zeros(len(docs) + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(docs).cumsum(0)
    ids = torch.zeros(1, total, dtype=torch.long)
    uniform = docs[0] if len(set(docs)) == 1 else 0
    return PackedInputs(ids, ids.clone(), cu, max(docs), uniform).to(device)


def _qkv(n: int, heads: int, kv: int, dim: int, device, dtype, seed: int = 0):
    g = torch.Generator(device="cpu").manual_seed(seed)

    def make(h: int) -> torch.Tensor:  # [1, H, N, D] with [1, N, H, D] memory, as HF makes it
        x = torch.randn(1, n, h, dim, generator=g).to(device, dtype).transpose(1, 2)
        return x.requires_grad_(True)

    return make(heads), make(kv), make(kv)


def _call(name: str, packed: Any, compiled: dict) -> Any:
    from tritonforge.training import attention

    fn = attention.PACKED_ATTENTION[name]
    if name == "flex":  # fused only under torch.compile
        fn = compiled.setdefault("flex", torch.compile(fn))
    kw = attention.packing_kwargs(packed, name)
    return lambda q, k, v: fn(q, k, v, kw, q.shape[-1] ** -0.5)


def check(name: str, heads: int, kv: int, dim: int, device, compiled: dict) -> dict:
    """Max relative error of output and q/k/v gradients against per-sample fp32 attention."""
    lengths = [512] * 4 if name.startswith("sdpa") else [300, 1000, 77, 671]
    packed = _row(lengths, 64, device)
    q, k, v = _qkv(packed.num_tokens, heads, kv, dim, device, torch.bfloat16)
    ref_in = [x.detach().float().requires_grad_(True) for x in (q, k, v)]
    out = _call(name, packed, compiled)(q, k, v)
    ref = _call("loop", packed, compiled)(*ref_in)
    grad = torch.randn_like(ref)
    out.backward(grad.to(out.dtype))
    ref.backward(grad)
    errs = {"out": _rel(out, ref)}
    errs.update({f"d{n}": _rel(a.grad, b.grad) for n, a, b in zip("qkv", (q, k, v), ref_in)})
    return {"max_rel_error": errs, "ok": max(errs.values()) < TOLERANCE}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return round(float((a.float() - b).abs().max() / b.abs().max().clamp(min=1e-6)), 5)


def speed(name: str, args, heads: int, kv: int, dim: int, device, compiled: dict) -> dict:
    """Forward + backward time on one row of the benchmark's micro-batch size."""
    packed = _row([args.seq] * (args.micro_tokens // args.seq), 64, device)
    q, k, v = _qkv(packed.num_tokens, heads, kv, dim, device, torch.bfloat16)
    fn = _call(name, packed, compiled)
    grad = torch.randn(1, packed.num_tokens, heads, dim, device=device, dtype=torch.bfloat16)
    times = []
    for i in range(7):
        tp.sync(device)
        t0 = time.perf_counter()
        fn(q, k, v).backward(grad)
        tp.sync(device)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    fl = 6.0 * args.seq * heads * dim * packed.num_tokens  # causal, fwd + bwd (see train_parts)
    return {"fwd_bwd_ms": round(t * 1e3, 3), "tflops": round(fl / t / 1e12, 1)}


def attention_phase(args, shape: str, device: torch.device) -> dict:
    from tritonforge.training import attention

    cfg = tp.qwen3_config(shape)
    heads, kv, dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    deadline = time.monotonic() + (45 if device.type == "cuda" else 300)
    compiled: dict = {}
    results: dict[str, Any] = {}
    names = [n for n in attention.PACKED_ATTENTION if attention.available(n, device)]
    names.sort(key=lambda n: n == "flex")  # flex compiles: last
    if device.type == "cpu":
        names = [n for n in names if n != "flex"]  # flex has no backward on CPU
    for name in names:
        if time.monotonic() > deadline:
            results[name] = {"status": "skipped_time"}
            continue
        if name == "flex" and results.get("varlen", {}).get("ok"):
            results[name] = {"status": "skipped", "why": "varlen works; flex only as fallback"}
            continue
        res = tp.guarded(check, name, heads, kv, dim, device, compiled)
        if res.get("ok"):
            res.update(tp.guarded(speed, name, args, heads, kv, dim, device, compiled))
        results[name] = res
    return {"backends": results, "chosen": choose(results)}


def choose(results: dict[str, dict]) -> dict[str, str]:
    """Fastest correct backend of each kind ("auto" when none was measured)."""

    def best(names: tuple[str, ...]) -> str:
        timed = [(r["fwd_bwd_ms"], n) for n, r in results.items()
                 if n in names and r.get("ok") and "fwd_bwd_ms" in r]  # fmt: skip
        return min(timed)[1] if timed else "auto"

    from tritonforge.training.attention import UNIFORM

    return {"uniform": best(UNIFORM), "ragged": best(RAGGED)}
