"""The lm head with its logits kept from forward to backward (`batch.lm_head = "triton_keep"`).

Covers: `KeptLogprobs` (an autograd Function over a micro-batch's K scored positions: the bf16
logits [K, V] from cuBLAS and one Triton pass for log-probs, logsumexp and entropy
(training.head_kernels); the logits stay on the device, and backward overwrites them with their
gradient in one Triton pass and runs the two gradient matmuls over them) and `logits_fit`
(whether the device has room to keep them; else the caller recomputes).
Why: the recompute path (training.logprobs, "triton" ops) redoes the logits matmul in backward,
2 K H V FLOPs (1.9e13 for the 0.6B benchmark's 61,448 scored positions: ~27 ms on an H200 at
its ~700 TFLOP/s), and sums its 8 chunks' weight gradients in fp32 (a [V, H] read-modify-write
per chunk, ~0.6 ms each). Keeping costs K V 2 bytes (18.7 GB there) from the head's forward to
its backward, when the rest of the step is at its activation peak.
cuBLAS calls take row blocks of at most GEMM_MAX_ELEMENTS elements of the logits (14,134 rows at
Qwen3's vocabulary: 5 blocks there); the weight gradient is one matmul when the logits fit one
call, else per block summed in fp32 (5 read-modify-writes instead of 8).
Numerics: the same kernels on the same bf16 logits as the recompute path; the weight gradient
is rounded to bf16 per block (or once) where the recompute path rounds per chunk.
Does not cover: choosing the scored positions (training.logprobs.scored_logprobs), double
backward (`retain_graph`: the logits are overwritten by the first backward, so a second one
raises instead of returning wrong gradients).
"""

from __future__ import annotations

import torch

__all__ = [
    "GEMM_MAX_ELEMENTS",
    "RESERVE_FRACTION",
    "RESERVE_MIN_BYTES",
    "KeptLogprobs",
    "gemm_rows",
    "logits_bytes",
    "logits_fit",
    "room_for",
]

Tensor = torch.Tensor

# The largest matrix handed to one cuBLAS call: [K, V] logits past 2^31 elements (the 0.6B
# benchmark's are 9.3e9) go in row blocks of at most this many elements (cuBLAS has had
# 32-bit offset bugs with larger operands); the Triton passes index in 64 bits.
GEMM_MAX_ELEMENTS = 2**31 - 1
# Kept only while this much device memory stays free besides them: what the rest of the step
# allocates after the head's forward (the head's own gradients, the parameters' gradients, a
# layer's backward temporaries, the optimizer's fp32 gradient sums once the logits are freed).
RESERVE_FRACTION = 0.10
RESERVE_MIN_BYTES = 4 << 30


def gemm_rows(vocab: int) -> int:
    """Rows of [*, vocab] logits per cuBLAS call (GEMM_MAX_ELEMENTS)."""
    return max(1, GEMM_MAX_ELEMENTS // max(vocab, 1))


def logits_bytes(rows: int, vocab: int, dtype: torch.dtype) -> int:
    return rows * vocab * dtype.itemsize


def logits_fit(rows: int, vocab: int, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether [rows, vocab] logits of `dtype` can stay on `device` until backward: the free
    memory (the driver's, plus what the caching allocator holds unused) minus a reserve
    (RESERVE_FRACTION of the device, at least RESERVE_MIN_BYTES). Host queries only, no sync.
    Devices without a memory query (the CPU) always fit."""
    if device.type != "cuda":
        return True
    free, total = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return room_for(logits_bytes(rows, vocab, dtype), free, cached, total)


def room_for(
    need: int,
    free: int,
    cached: int,
    total: int,
    fraction: float = RESERVE_FRACTION,
    min_bytes: int = RESERVE_MIN_BYTES,
) -> bool:
    """`need` more bytes leave max(min_bytes, fraction x total) of `free` + `cached` unused."""
    return need + max(min_bytes, int(fraction * total)) <= free + cached


class KeptLogprobs(torch.autograd.Function):
    """(logp [K], entropy [K] or [0]) of softmax(hidden @ W^T / temperature) at `targets`, fp32.

    Saves the inputs, two [K] vectors and the [K, V] logits in the weight's dtype; all targets
    must be valid ids (scored positions). The logits become the gradient in backward."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        hidden_kh: Tensor,
        weight_vh: Tensor,
        targets_k: Tensor,
        temperature: float,
        compute_entropy: bool,
        block_rows: int,
    ) -> tuple[Tensor, Tensor]:
        from tritonforge.training import head_kernels

        h_kh = hidden_kh.to(weight_vh.dtype)
        z_kv = h_kh.new_empty(h_kh.shape[0], weight_vh.shape[0])
        for s in range(0, h_kh.shape[0], block_rows):  # row blocks: contiguous slices
            torch.mm(h_kh[s : s + block_rows], weight_vh.t(), out=z_kv[s : s + block_rows])
        logp_k, lse_k, ent_k = head_kernels.logprobs_lse_entropy(
            z_kv, targets_k, 1.0 / temperature, compute_entropy
        )
        ctx.save_for_backward(h_kh, weight_vh, targets_k, lse_k, ent_k)
        ctx.logits = z_kv  # not a saved tensor: backward writes over it (Triton, in place)
        ctx.temperature, ctx.compute_entropy = temperature, compute_entropy
        ctx.block_rows = block_rows
        ctx.hidden_dtype = hidden_kh.dtype
        ctx.set_materialize_grads(False)
        if not compute_entropy:
            ctx.mark_non_differentiable(ent_k)
        return logp_k, ent_k

    @staticmethod
    def backward(ctx, g_logp_k: Tensor | None, g_ent_k: Tensor | None):  # type: ignore[override]
        from tritonforge.training import head_kernels

        if ctx.logits is None:
            raise RuntimeError(
                "the lm head's kept logits were overwritten by an earlier backward "
                "(retain_graph is not supported by batch.lm_head = 'triton_keep')"
            )
        h_kh, weight_vh, targets_k, lse_k, ent_k = ctx.saved_tensors
        z_kv, ctx.logits = ctx.logits, None  # freed with the gradient below
        if g_logp_k is None:
            g_logp_k = lse_k.new_zeros(lse_k.shape)
        use_ent = ctx.compute_entropy and g_ent_k is not None
        ent = (ent_k, g_ent_k.float()) if use_ent else None
        g_kv = head_kernels.grad_logits_(
            z_kv, targets_k, lse_k, g_logp_k.float(), ent, 1.0 / ctx.temperature
        )
        d_hidden = d_weight = None
        if ctx.needs_input_grad[0]:
            d_hidden = _row_blocks_mm(g_kv, weight_vh, ctx.block_rows).to(ctx.hidden_dtype)
        if ctx.needs_input_grad[1]:
            d_weight = _weight_grad(g_kv, h_kh, ctx.block_rows)
        return d_hidden, d_weight, None, None, None, None


def _row_blocks_mm(a_kv: Tensor, b_vh: Tensor, rows: int) -> Tensor:
    """a @ b, `rows` rows of `a` per cuBLAS call."""
    out = a_kv.new_empty(a_kv.shape[0], b_vh.shape[1])
    for s in range(0, a_kv.shape[0], rows):
        torch.mm(a_kv[s : s + rows], b_vh, out=out[s : s + rows])
    return out


def _weight_grad(g_kv: Tensor, h_kh: Tensor, rows: int) -> Tensor:
    """g^T @ h [V, H] in g's dtype: one cuBLAS call (fp32 accumulation inside, one rounding)
    when g fits one, else per block of `rows` rows, summed in fp32 (as the recompute path
    sums its chunks)."""
    if g_kv.shape[0] <= rows:
        return g_kv.t() @ h_kh
    acc = torch.zeros(g_kv.shape[1], h_kh.shape[1], dtype=torch.float32, device=g_kv.device)
    for s in range(0, g_kv.shape[0], rows):
        acc += g_kv[s : s + rows].t() @ h_kh[s : s + rows]
    return acc.to(g_kv.dtype)
