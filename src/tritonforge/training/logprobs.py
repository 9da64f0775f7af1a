"""Token log-probs (and entropies) from hidden states without full-vocabulary fp32 logits.

Covers: `scored_logprobs` (the trainer's path: the scored positions given by host-side indices)
and `chunked_token_logprobs` ([B, T] targets, ignored ones < 0), which walk the tokens in chunks,
compute each chunk's logits in the lm-head weight's dtype, upcast only that chunk to fp32 for
logsumexp/softmax, and in backward recompute the chunk's logits (a custom autograd Function), so
memory beyond the inputs is O(chunk_tokens * V), never O(B * T * V). The per-chunk functions run
eagerly (`EAGER`) or under torch.compile (`compiled_ops`), where each chunk is a matmul plus a
few fused passes over its logits, or as cuBLAS matmuls around Triton passes (`TRITON`).
`TRITON_KEEP` trades the bounded memory for speed: where the device has room and a backward
will follow, the micro-batch's bf16 logits [K, V] are computed once and kept for the backward
(training.head_keep). `token_logprobs_from_logits` / `entropy_from_logits` serve small cases
where logits already exist.
Does not cover: running the model body, shifting inputs to targets (the caller passes
`targets[b, t]` = the token predicted from `hidden[b, t]`), or unsharding FSDP weights (call this
where the lm-head weight is a full tensor).

Targets < 0 (e.g. -100 for prompt, feedback and padding positions) are ignored: their log-prob
and entropy are 0, they get no gradient and cost no compute.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tritonforge.training import head_keep

__all__ = [
    "EAGER",
    "HEADS",
    "TRITON",
    "TRITON_KEEP",
    "ChunkOps",
    "chunked_token_logprobs",
    "compiled_ops",
    "entropy_from_logits",
    "head_ops",
    "scored_logprobs",
    "token_logprobs_from_logits",
]

Tensor = torch.Tensor


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for half types, else the dtype itself (float64 stays float64 for gradchecks)."""
    return torch.promote_types(dtype, torch.float32)


def _chunk_logits(h_ch: Tensor, weight_vh: Tensor, inv_temp: float) -> Tensor:
    """[c, V] logits / temperature: matmul in the weight dtype, result upcast (fp32 for halves)."""
    z_cv = (h_ch.to(weight_vh.dtype) @ weight_vh.t()).to(_compute_dtype(weight_vh.dtype))
    return z_cv * inv_temp if inv_temp != 1.0 else z_cv


def _chunk_forward(
    h_ch: Tensor, weight_vh: Tensor, tgt_c: Tensor, inv_temp: float, want_ent: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """(logp [c], logsumexp [c], entropy [c] or [0]) of one chunk. H = lse - sum_v p_v z_v."""
    z_cv = _chunk_logits(h_ch, weight_vh, inv_temp)
    lse_c = torch.logsumexp(z_cv, dim=-1)
    logp_c = z_cv.gather(1, tgt_c[:, None]).squeeze(1) - lse_c
    if not want_ent:
        return logp_c, lse_c, lse_c.new_zeros(0)
    p_cv = torch.exp(z_cv - lse_c[:, None])
    return logp_c, lse_c, lse_c - (p_cv * z_cv).sum(-1)


def _chunk_backward(
    h_ch: Tensor,
    weight_vh: Tensor,
    tgt_c: Tensor,
    lse_c: Tensor,
    g_logp_c: Tensor,
    ent: tuple[Tensor, Tensor] | None,
    inv_temp: float,
) -> tuple[Tensor, Tensor]:
    """(d hidden [c, H], d weight [V, H]) of one chunk, both in the weight dtype.

    d logp[tgt] / dz = onehot(tgt) - p;  d H / dz = -p * (log p + H); z = logits / temperature.
    """
    logsm_cv = _chunk_logits(h_ch, weight_vh, inv_temp) - lse_c[:, None]
    p_cv = torch.exp(logsm_cv)
    g_cv = -p_cv * g_logp_c[:, None]
    if ent is not None:
        ent_c, g_ent_c = ent
        g_cv = g_cv - (g_ent_c[:, None] * p_cv) * (logsm_cv + ent_c[:, None])
    vocab = torch.arange(weight_vh.shape[0], device=tgt_c.device)
    g_cv = g_cv + torch.where(vocab[None, :] == tgt_c[:, None], g_logp_c[:, None], 0.0)
    g_cv = (g_cv * inv_temp).to(weight_vh.dtype)
    return g_cv @ weight_vh, g_cv.t() @ h_ch.to(weight_vh.dtype)


@dataclass(frozen=True)
class ChunkOps:
    """The per-chunk forward and backward: plain eager functions or torch.compile'd ones.

    `keep` (the Triton ops only): a predicate (rows, vocab, dtype, device) -> bool; where it
    holds, a micro-batch that needs gradients runs in one piece with its logits kept for
    backward instead (training.head_keep), else chunked with recompute."""

    forward: Callable[..., tuple[Tensor, Tensor, Tensor]]
    backward: Callable[..., tuple[Tensor, Tensor]]
    keep: Callable[[int, int, torch.dtype, torch.device], bool] | None = None


EAGER = ChunkOps(_chunk_forward, _chunk_backward)
_COMPILED: dict[str, ChunkOps] = {}


def compiled_ops(backend: str = "inductor") -> ChunkOps:
    """The chunk functions under torch.compile (dynamic shapes: chunk sizes vary without
    recompiling). Inductor fuses the upcast, logsumexp, gather, entropy and the gradient of a
    chunk into a few passes over its bf16 logits."""
    if backend not in _COMPILED:
        _COMPILED[backend] = ChunkOps(
            torch.compile(_chunk_forward, dynamic=True, backend=backend),
            torch.compile(_chunk_backward, dynamic=True, backend=backend),
        )
    return _COMPILED[backend]


def _triton_forward(
    h_ch: Tensor, weight_vh: Tensor, tgt_c: Tensor, inv_temp: float, want_ent: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """_chunk_forward as a cuBLAS matmul and one Triton pass over the logits."""
    from tritonforge.training import head_kernels

    z_cv = h_ch.to(weight_vh.dtype) @ weight_vh.t()
    return head_kernels.logprobs_lse_entropy(z_cv, tgt_c, inv_temp, want_ent)


def _triton_backward(
    h_ch: Tensor,
    weight_vh: Tensor,
    tgt_c: Tensor,
    lse_c: Tensor,
    g_logp_c: Tensor,
    ent: tuple[Tensor, Tensor] | None,
    inv_temp: float,
) -> tuple[Tensor, Tensor]:
    """_chunk_backward as cuBLAS matmuls and one Triton pass writing the logits' gradient over
    the recomputed logits."""
    from tritonforge.training import head_kernels

    h = h_ch.to(weight_vh.dtype)
    g_cv = head_kernels.grad_logits_(h @ weight_vh.t(), tgt_c, lse_c, g_logp_c, ent, inv_temp)
    return g_cv @ weight_vh, g_cv.t() @ h


TRITON = ChunkOps(_triton_forward, _triton_backward)
TRITON_KEEP = ChunkOps(_triton_forward, _triton_backward, keep=head_keep.logits_fit)
HEADS = ("eager", "compiled", "triton", "triton_keep")


@functools.cache
def _triton_imports() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:  # a broken install (e.g. a driver mismatch) as well as a missing one
        return False
    return True


def head_ops(name: str, compiled: bool, device: torch.device) -> ChunkOps:
    """The lm head's chunk functions by name: eager, compiled (inductor), triton (training.
    head_kernels), triton_keep (triton, the logits kept from forward to backward where the
    device has room: training.head_keep); the Triton ones on CUDA only, elsewhere the automatic
    choice. auto = triton_keep on CUDA where Triton imports (the fastest head of the trainer
    benchmark on the H200: 0.888 s against 0.943 s compiled for the 0.6B step,
    docs/benchmarks.md), elsewhere compiled when the layers are compiled, else eager."""
    triton_ops = {"triton": TRITON, "triton_keep": TRITON_KEEP}
    if name in triton_ops and device.type == "cuda":
        return triton_ops[name]
    if name == "auto" and device.type == "cuda" and _triton_imports():
        return TRITON_KEEP
    if name == "compiled" or (name in ("auto", *triton_ops) and compiled):
        return compiled_ops()
    return EAGER


class _ChunkedLogprobs(torch.autograd.Function):
    """logp[n] = log softmax(hidden[n] @ W^T / temp)[target[n]] (+ entropy[n]), chunked over n.

    Saves only the inputs plus two [N] vectors (logsumexp, entropy); backward recomputes logits.
    All targets must be valid ids (the callers select scored positions first).
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        hidden_nh: Tensor,
        weight_vh: Tensor,
        targets_n: Tensor,
        chunk_tokens: int,
        temperature: float,
        compute_entropy: bool,
        ops: ChunkOps = EAGER,
    ) -> tuple[Tensor, Tensor]:
        cd = _compute_dtype(weight_vh.dtype)
        n = hidden_nh.shape[0]
        logp_n = hidden_nh.new_empty(n, dtype=cd)
        lse_n = hidden_nh.new_empty(n, dtype=cd)
        ent_n = hidden_nh.new_empty(n if compute_entropy else 0, dtype=cd)
        for s in range(0, n, chunk_tokens):
            e = min(s + chunk_tokens, n)
            logp_c, lse_c, ent_c = ops.forward(
                hidden_nh[s:e], weight_vh, targets_n[s:e], 1.0 / temperature, compute_entropy
            )
            logp_n[s:e], lse_n[s:e] = logp_c, lse_c
            if compute_entropy:
                ent_n[s:e] = ent_c
        ctx.save_for_backward(hidden_nh, weight_vh, targets_n, lse_n, ent_n)
        ctx.chunk_tokens, ctx.temperature, ctx.ops = chunk_tokens, temperature, ops
        ctx.compute_entropy = compute_entropy
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None
        if not compute_entropy:
            ctx.mark_non_differentiable(ent_n)
        return logp_n, ent_n

    @staticmethod
    def backward(ctx, g_logp_n: Tensor | None, g_ent_n: Tensor | None):  # type: ignore[override]
        hidden_nh, weight_vh, targets_n, lse_n, ent_n = ctx.saved_tensors
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        cd = lse_n.dtype
        use_ent = ctx.compute_entropy and g_ent_n is not None
        if g_logp_n is None:
            g_logp_n = lse_n.new_zeros(lse_n.shape)
        d_hidden_nh = torch.empty_like(hidden_nh) if need_h else None
        d_weight_vh = torch.zeros(weight_vh.shape, dtype=cd, device=weight_vh.device)
        for s in range(0, hidden_nh.shape[0], ctx.chunk_tokens):
            e = min(s + ctx.chunk_tokens, hidden_nh.shape[0])
            d_h, d_w = ctx.ops.backward(
                hidden_nh[s:e], weight_vh, targets_n[s:e], lse_n[s:e], g_logp_n[s:e].to(cd),
                (ent_n[s:e], g_ent_n[s:e].to(cd)) if use_ent else None, 1.0 / ctx.temperature,
            )  # fmt: skip
            if d_hidden_nh is not None:
                d_hidden_nh[s:e] = d_h
            if need_w:  # accumulated in fp32 (or wider) over chunks
                d_weight_vh += d_w
        d_weight = d_weight_vh.to(weight_vh.dtype) if need_w else None
        return d_hidden_nh, d_weight, None, None, None, None, None


def chunked_token_logprobs(
    hidden: Tensor,
    lm_head_weight: Tensor,
    targets: Tensor,
    chunk_tokens: int = 1024,
    temperature: float = 1.0,
    compute_entropy: bool = False,
    ops: ChunkOps = EAGER,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs of `targets` [B, T] under `hidden` [B, T, H] @ `lm_head_weight` [V, H]^T / temperature.

    Returns (logp [B, T], entropy [B, T] or None) in fp32 (float64 for float64 weights), with
    gradients to `hidden` and `lm_head_weight`; ignored targets (< 0) give 0.
    """
    if hidden.dim() != 3 or targets.shape != hidden.shape[:2]:
        raise ValueError(
            f"hidden {tuple(hidden.shape)} must be [B, T, H] and targets [B, T], got {tuple(targets.shape)}"
        )
    if lm_head_weight.dim() != 2 or lm_head_weight.shape[1] != hidden.shape[2]:
        raise ValueError(
            f"lm_head_weight {tuple(lm_head_weight.shape)} must be [V, {hidden.shape[2]}]"
        )
    if chunk_tokens < 1 or temperature <= 0:
        raise ValueError(
            f"chunk_tokens must be >= 1 and temperature > 0, got {chunk_tokens}, {temperature}"
        )
    b, t, h = hidden.shape
    vocab = lm_head_weight.shape[0]
    targets_n = targets.reshape(b * t).long()
    if targets_n.numel() and int(targets_n.max()) >= vocab:
        raise ValueError(f"target id {int(targets_n.max())} is outside the vocabulary of {vocab}")
    idx_k = (targets_n >= 0).nonzero().squeeze(1)  # [K] positions that are scored (a host sync)
    logp_n, ent_n = scored_logprobs(
        hidden.reshape(b * t, h), lm_head_weight, idx_k, targets_n[idx_k], idx_k, b * t,
        chunk_tokens, temperature, compute_entropy, ops,
    )  # fmt: skip
    return logp_n.view(b, t), ent_n.view(b, t) if ent_n is not None else None


def scored_logprobs(
    hidden_nh: Tensor,
    lm_head_weight: Tensor,
    src_k: Tensor,
    targets_k: Tensor,
    dst_k: Tensor,
    out_numel: int,
    chunk_tokens: int = 1024,
    temperature: float = 1.0,
    compute_entropy: bool = False,
    ops: ChunkOps = EAGER,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs (and entropies) of the K scored positions `src_k` of `hidden_nh` [N, H] with
    valid `targets_k`, written at `dst_k` of flat [out_numel] outputs (zeros elsewhere). The
    indices come from the host (batching.Scoring), so nothing here waits for the device."""
    h_kh = hidden_nh.index_select(0, src_k)
    if _keeps(ops, h_kh, lm_head_weight):
        rows = head_keep.gemm_rows(lm_head_weight.shape[0])
        logp_k, ent_k = head_keep.KeptLogprobs.apply(
            h_kh, lm_head_weight, targets_k, temperature, compute_entropy, rows
        )
    else:
        logp_k, ent_k = _ChunkedLogprobs.apply(
            h_kh, lm_head_weight, targets_k, chunk_tokens, temperature, compute_entropy, ops
        )
    logp = logp_k.new_zeros(out_numel).index_copy(0, dst_k, logp_k)
    ent = ent_k.new_zeros(out_numel).index_copy(0, dst_k, ent_k) if compute_entropy else None
    return logp, ent


def _keeps(ops: ChunkOps, h_kh: Tensor, weight_vh: Tensor) -> bool:
    """Whether this call keeps its logits: ops that can, a backward to come, and room."""
    grads = torch.is_grad_enabled() and (h_kh.requires_grad or weight_vh.requires_grad)
    if ops.keep is None or not grads:
        return False
    return ops.keep(h_kh.shape[0], weight_vh.shape[0], weight_vh.dtype, weight_vh.device)


def token_logprobs_from_logits(logits: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
    """Plain log-probs [B, T] of `targets` [B, T] from full `logits` [B, T, V] (fp32 or wider);
    targets < 0 give 0. For small cases and as the reference the chunked path is tested against."""
    logsm_btv = torch.log_softmax(logits.to(_compute_dtype(logits.dtype)) / temperature, dim=-1)
    valid_bt = targets >= 0
    picked_bt = logsm_btv.gather(-1, targets.clamp(min=0).long().unsqueeze(-1)).squeeze(-1)
    return torch.where(valid_bt, picked_bt, torch.zeros_like(picked_bt))


def entropy_from_logits(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Entropy [B, T] of softmax(`logits` [B, T, V] / temperature), in fp32 or wider."""
    logsm_btv = torch.log_softmax(logits.to(_compute_dtype(logits.dtype)) / temperature, dim=-1)
    return -(logsm_btv.exp() * logsm_btv).sum(-1)
