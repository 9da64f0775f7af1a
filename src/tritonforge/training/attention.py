"""Attention over packed rows, plugged into Hugging Face models through their attention registry.

Covers: `PACKED_ATTENTION`, a registry of functions computing causal attention over one packed
row of several sequences (`cu_seqlens` offsets), each [1, H, N, D] -> [1, N, H, D]:
  varlen       torch.nn.attention.varlen.varlen_attn (FlashAttention-2 varlen kernel; CUDA,
               torch >= 2.10), grouped-query heads native
  flex         flex_attention with a document-causal BlockMask built from the offsets (any
               device; fused only under torch.compile)
  loop         scaled_dot_product_attention per sequence (any device; the CPU path)
  sdpa         every sequence has the same length L: the row is reshaped to [S, H, L, D] and
               runs as one causal SDPA call (torch picks the kernel: cuDNN, flash, ...)
  sdpa_cudnn   the same with the cuDNN kernel forced (keys/values repeated to all heads)
  sdpa_flash   the same with the flash kernel forced
`install(lm)` registers "tritonforge_<original>" in transformers' AttentionInterface (and the
original's mask function in AttentionMaskInterface) and switches the model to it: a call that
carries packing kwargs (`packing_kwargs`) runs the chosen packed function (no dropout), any
other call runs the model's original attention unchanged. `available(name, device)` says whether a function can
run here; `resolve` picks one for a row.

The SDPA-based functions (loop, sdpa, sdpa_cudnn, sdpa_flash) run eagerly, also inside compiled
layers (graph breaks: `torch.compiler.disable`), on HF's own layouts ([B, H, L, D] views of
[B, L, H, D] memory), their output gradient reaching the kernel in that layout
(`_ContiguousGrad`): the very call the eager model makes. Why: on an H200 the dense path
compiled by inductor (tiny model, head dim 16, a checkpointed layer) gave gradients 31% off
with forward values right (the CPU agrees). Eager calls take inductor's lowering of SDPA out
of the path, and a fixed gradient layout keeps cuDNN's cached backward graphs valid (torch
keys them by q/k/v strides only; a graph also fixes the output gradient's strides).
Does not cover: building packed rows (training.packing) or sliding-window layers (a model with
them is not packed: `supports_packing`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tritonforge.config.registry import Registry
from tritonforge.logging_setup import get_logger

__all__ = [
    "PACKED_ATTENTION",
    "UNIFORM",
    "available",
    "install",
    "packed_masks",
    "packing_kwargs",
    "resolve",
    "supports_packing",
]

log = get_logger(__name__)
Tensor = torch.Tensor
PackedFn = Callable[[Tensor, Tensor, Tensor, dict[str, Any], float], Tensor]
PACKED_ATTENTION: Registry[PackedFn] = Registry("packed attention")
UNIFORM = ("sdpa", "sdpa_cudnn", "sdpa_flash")  # need every sequence of a row equally long
PREFIX = "tritonforge_"


def register(name: str, eager: bool = False) -> Callable[[PackedFn], PackedFn]:
    """Register a packed attention; `eager`: run by `_run_eagerly` (module docstring)."""

    def deco(fn: PackedFn) -> PackedFn:
        PACKED_ATTENTION.register(name, _run_eagerly(fn) if eager else fn)
        return fn

    return deco


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the incoming gradient contiguous."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g: Tensor) -> Tensor:  # type: ignore[override]
        return g.contiguous()


def _run_eagerly(fn: PackedFn) -> PackedFn:
    """`fn` outside compiled graphs; its [1, N, H, D] output is contiguous, so its gradient,
    made contiguous, reaches the kernel in the kernel's output layout.

    Inside a compiled layer q, k and v leave the graph as new contiguous [1, N, H, D] tensors
    (HF's projections' memory layout; inductor writes them in the kernels that make them: the
    rotary embedding for q and k) and become HF's [1, H, N, D] views again inside: the kernel
    sees what it saw before, and their gradients come back contiguous, which is what
    AOTAutograd expects of a graph output's gradient. HF's views as the graph's outputs (or
    views of its intermediates: the same to AOTAutograd) cost a copy of each gradient in every
    layer's backward (2.3% of the 0.6B shape's H200 step)."""

    @torch.compiler.disable
    def eager(q: Tensor, k: Tensor, v: Tensor, meta: dict[str, Any], scale: float) -> Tensor:
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        return _ContiguousGrad.apply(fn(q, k, v, meta, scale))

    @functools.wraps(fn)
    def run(q: Tensor, k: Tensor, v: Tensor, meta: dict[str, Any], scale: float) -> Tensor:
        if not torch.compiler.is_compiling():
            return eager(*(x.transpose(1, 2) for x in (q, k, v)), meta, scale)
        fmt = torch.contiguous_format
        return eager(*(x.transpose(1, 2).clone(memory_format=fmt) for x in (q, k, v)), meta, scale)

    return run


def _repeat_kv(x_bhnd: Tensor, groups: int) -> Tensor:
    if groups == 1:
        return x_bhnd
    b, h, n, d = x_bhnd.shape
    return x_bhnd[:, :, None].expand(b, h, groups, n, d).reshape(b, h * groups, n, d)


def _groups(q: Tensor, k: Tensor) -> int:
    return q.shape[1] // k.shape[1]


# ---------------------------------------------------------------------------------------------
# varlen (FlashAttention-2 varlen kernel through torch)
# ---------------------------------------------------------------------------------------------


def _varlen_fn() -> Callable[..., Tensor] | None:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    if "window_size" in params:  # torch >= 2.11: causal is window (-1, 0)
        return lambda *a, **k: varlen_attn(*a, window_size=(-1, 0), **k)
    if "is_causal" in params:  # torch 2.10
        return lambda *a, **k: varlen_attn(*a, is_causal=True, **k)
    return None


_VARLEN = _varlen_fn()


@register("varlen")
def varlen_attention(q: Tensor, k: Tensor, v: Tensor, meta: dict[str, Any], scale: float) -> Tensor:
    if _VARLEN is None:
        raise RuntimeError("torch.nn.attention.varlen.varlen_attn is not available in this torch")
    cu, max_len = meta["tf_cu_seqlens"], meta["tf_max_len"]
    out_nhd = _VARLEN(
        q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1),
        cu, cu, max_len, max_len, scale=scale,
    )  # fmt: skip
    return out_nhd[None]


# ---------------------------------------------------------------------------------------------
# flex_attention with a document-causal block mask
# ---------------------------------------------------------------------------------------------


def document_ids(cu_seqlens: Tensor, n: int) -> Tensor:
    """[N] int32 index of the sequence each packed position belongs to (no host sync)."""
    pos = torch.arange(n, device=cu_seqlens.device, dtype=cu_seqlens.dtype)
    return (torch.bucketize(pos, cu_seqlens[1:], right=True)).to(torch.int32)


def _ordered(dense_qk: Tensor) -> tuple[Tensor, Tensor]:
    dense = dense_qk.to(torch.int32)
    num = dense.sum(-1).to(torch.int32)
    idx = torch.argsort(dense, dim=-1, descending=True, stable=True).to(torch.int32)
    return num[None, None].contiguous(), idx[None, None].contiguous()


def document_block_mask(cu_seqlens: Tensor, n: int, block: int = 128) -> Any:
    """BlockMask of causal attention within each sequence of a packed row of `n` tokens, built
    from block-level bounds (O((n / block)^2), no [n, n] mask and no host sync). Sequences are
    contiguous and ordered, so a block holds the sequences first..last of its tokens."""
    from torch.nn.attention.flex_attention import BlockMask

    doc = document_ids(cu_seqlens, n)
    nb = -(-n // block)
    pad = nb * block - n
    padded = torch.cat([doc, doc[-1:].expand(pad)]) if pad else doc
    first, last = padded.view(nb, block)[:, 0], padded.view(nb, block)[:, -1]
    qi = torch.arange(nb, device=doc.device)[:, None]
    kj = torch.arange(nb, device=doc.device)[None, :]
    any_qk = (kj <= qi) & (last[None, :] >= first[:, None])
    one_doc = first == last
    full_qk = (kj < qi) & one_doc[:, None] & one_doc[None, :] & (first[:, None] == first[None, :])

    def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    kv_num, kv_idx = _ordered(any_qk & ~full_qk)
    full_num, full_idx = _ordered(full_qk)
    return BlockMask.from_kv_blocks(
        kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=block, mask_mod=mask_mod, seq_lengths=(n, n)
    )


@register("flex")
def flex_packed_attention(
    q: Tensor, k: Tensor, v: Tensor, meta: dict[str, Any], scale: float
) -> Tensor:
    from torch.nn.attention.flex_attention import flex_attention

    block_mask = meta.get("tf_block_mask")
    if block_mask is None:
        block_mask = document_block_mask(meta["tf_cu_seqlens"], q.shape[2])
    out = flex_attention(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=_groups(q, k) > 1)
    return out.transpose(1, 2)


# ---------------------------------------------------------------------------------------------
# SDPA per sequence, and dense SDPA when all sequences are equally long
# ---------------------------------------------------------------------------------------------


@register("loop", eager=True)
def loop_attention(q: Tensor, k: Tensor, v: Tensor, meta: dict[str, Any], scale: float) -> Tensor:
    bounds = meta.get("tf_bounds")  # the offsets on the host (packing_kwargs passes them)
    bounds = (bounds if bounds is not None else meta["tf_cu_seqlens"]).tolist()
    gqa = _groups(q, k) > 1
    q, k, v = (_as_batches(x, x.shape[2]) for x in (q, k, v))  # [1, H, N, D] of [1, N, H, D]
    outs = [
        F.scaled_dot_product_attention(
            q[:, :, s:e], k[:, :, s:e], v[:, :, s:e], is_causal=True, scale=scale, enable_gqa=gqa
        ).transpose(1, 2)
        for s, e in itertools.pairwise(bounds)
        if e > s
    ]
    return torch.cat(outs, dim=1)


def _as_batches(x_1hnd: Tensor, length: int) -> Tensor:
    """[1, H, N, D] -> [N / length, H, length, D] views of contiguous [N / length, length, H, D]
    memory (no copy when the memory is [1, N, H, D] already, as HF models make it)."""
    _, h, n, d = x_1hnd.shape
    return x_1hnd.transpose(1, 2).reshape(n // length, length, h, d).transpose(1, 2)


def _dense(q: Tensor, k: Tensor, v: Tensor, meta: dict[str, Any], scale: float, repeat: bool):
    length = meta["tf_uniform_len"]
    if not length:
        raise ValueError("dense SDPA needs a row of equally long sequences (uniform_len > 0)")
    groups = _groups(q, k)
    if repeat:
        k, v = _repeat_kv(k, groups), _repeat_kv(v, groups)
    qs, ks, vs = (_as_batches(x, length) for x in (q, k, v))
    out = F.scaled_dot_product_attention(
        qs, ks, vs, is_causal=True, scale=scale, enable_gqa=groups > 1 and not repeat
    )
    return out.transpose(1, 2).reshape(1, q.shape[2], q.shape[1], q.shape[3])


@register("sdpa", eager=True)
def sdpa_uniform(q: Tensor, k: Tensor, v: Tensor, meta: dict[str, Any], scale: float) -> Tensor:
    return _dense(q, k, v, meta, scale, repeat=False)


@register("sdpa_cudnn", eager=True)
def sdpa_cudnn(q: Tensor, k: Tensor, v: Tensor, meta: dict[str, Any], scale: float) -> Tensor:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return _dense(q, k, v, meta, scale, repeat=True)


@register("sdpa_flash", eager=True)
def sdpa_flash(q: Tensor, k: Tensor, v: Tensor, meta: dict[str, Any], scale: float) -> Tensor:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return _dense(q, k, v, meta, scale, repeat=False)


# ---------------------------------------------------------------------------------------------
# choosing, and plugging into transformers
# ---------------------------------------------------------------------------------------------


def available(name: str, device: torch.device) -> bool:
    """Whether packed attention `name` can run on `device` with this torch."""
    if name not in PACKED_ATTENTION:
        return False
    if name == "varlen":
        return device.type == "cuda" and _VARLEN is not None
    if name in ("sdpa_cudnn", "sdpa_flash"):
        return device.type == "cuda"
    if name == "flex":
        try:
            import torch.nn.attention.flex_attention  # noqa: F401
        except ImportError:
            return False
    return True


def resolve(
    ragged: str,
    uniform: str,
    uniform_len: int,
    device: torch.device,
    dtype: torch.dtype = torch.bfloat16,
) -> str:
    """The packed attention for a row: `uniform` ("auto": sdpa) when all its sequences are
    equally long and `uniform` is not "same", else `ragged` ("auto": varlen on CUDA in half
    precision when torch has it, loop otherwise). A named kernel that cannot run here (a CUDA
    one on the CPU, varlen without torch's varlen_attn) falls back to the automatic choice,
    with a warning the first time."""
    half = dtype in (torch.bfloat16, torch.float16)
    if uniform_len and uniform != "same":
        choice = "sdpa" if uniform == "auto" else uniform
        fallback = "sdpa"
    else:
        fallback = "varlen" if half and available("varlen", device) else "loop"
        choice = fallback if ragged == "auto" else ragged
    if available(choice, device) and (half or choice != "varlen"):  # flash: half precision
        return choice
    if (choice, device.type) not in _WARNED:
        _WARNED.add((choice, device.type))
        log.warning("packed attention %s cannot run on %s here; using %s", choice, device, fallback)
    return fallback


_WARNED: set[tuple[str, str]] = set()


def packing_kwargs(packed: Any, backend: str) -> dict[str, Any]:
    """Model-forward kwargs that make the installed attention run `backend` over `packed`
    (training.packing.PackedInputs on the device). They flow through the HF model's **kwargs to
    every attention call."""
    kw: dict[str, Any] = {
        "tf_attn": backend,
        "tf_cu_seqlens": packed.cu_seqlens,
        "tf_max_len": packed.max_len,
        "tf_uniform_len": packed.uniform_len,
    }
    if backend == "loop":  # runs eagerly on host offsets (a CPU tensor: dynamo does not
        kw["tf_bounds"] = packed.host_offsets()  # specialise on it as on a tuple of ints)
    if backend == "flex":
        kw["tf_block_mask"] = document_block_mask(packed.cu_seqlens, packed.num_tokens)
    return kw


class _PackedFlag(threading.local):
    active = False


_PACKED = _PackedFlag()


@contextlib.contextmanager
def packed_masks() -> Iterator[None]:
    """While active, the installed mask function builds no mask (for models that do not take
    prepared masks as a dict: their packed forwards need none, the kwargs carry the layout)."""
    before, _PACKED.active = _PACKED.active, True
    try:
        yield
    finally:
        _PACKED.active = before


def _fallback_attention(lm: nn.Module, original: str) -> Callable[..., Any]:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if original in ALL_ATTENTION_FUNCTIONS:
        return ALL_ATTENTION_FUNCTIONS[original]
    for module in lm.modules():  # "eager": the model file's own eager_attention_forward
        fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
        if fn is not None:
            return fn
    raise ValueError(f"no attention function for {original!r} to fall back to")


def supports_packing(lm: nn.Module) -> bool:
    """Packing keeps the model exact only without sliding-window layers."""
    types = getattr(lm.config, "layer_types", None) or []
    return "sliding_attention" not in types and not getattr(lm.config, "use_sliding_window", False)


def install(lm: nn.Module) -> str:
    """Register and switch `lm` to the packing-aware attention; returns its name (idempotent)."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import AttentionInterface

    original = lm.config._attn_implementation or "eager"
    if original.startswith(PREFIX):
        return original
    name = PREFIX + original
    fallback = _fallback_attention(lm, original)

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kw):
        backend = kw.get("tf_attn")
        if backend is None:
            return fallback(
                module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kw
            )
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        # Under autocast with fp32 weights q and k leave RoPE in fp32 while v (straight from its
        # projection) is in the compute dtype; SDPA would cast them under autocast, the packed
        # kernels are not autocast ops, so they get the compute dtype here.
        dtype = value.dtype
        return PACKED_ATTENTION[backend](query.to(dtype), key.to(dtype), value, kw, scale), None

    AttentionInterface.register(name, attention)
    mask_fn = ALL_MASK_ATTENTION_FUNCTIONS._global_mapping.get(original)
    if mask_fn is not None:
        from transformers.masking_utils import AttentionMaskInterface

        def mask(*args: Any, **kwargs: Any) -> Any:
            return None if _PACKED.active else mask_fn(*args, **kwargs)

        AttentionMaskInterface.register(name, mask)
    lm.config._attn_implementation = name
    log.info("packed attention installed", extra={"fields": {"fallback": original}})
    return name
