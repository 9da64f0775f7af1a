"""Triton kernels for the lm head's passes over a chunk's logits (training.logprobs "triton" ops).

Covers: `logprobs_lse_entropy` (one pass over each row of bf16 logits: online maximum and
sum of exponentials, rescaled per block as FlashAttention and Liger's cross entropy do, the
target's logit, and for the entropy the online sum of p * z) and
`grad_logits_` (the logits' gradient of log p(target) and entropy, written in place over the
logits). The matmuls around them stay cuBLAS (torch), so a chunk is: logits matmul, one read
pass (forward); logits matmul, one read + write pass, two matmuls (backward).
Why: inductor's kernels for these passes measured 1.6 and 2.1 ms per 4096 x 151936 chunk on
an H200 (several passes per row in the reduction), where one pass over 1.2 GB of bf16 logits
takes ~0.3 ms at the device's bandwidth and the gradient pass (read + write) ~0.7 ms.
Math (z = logits / temperature in fp32, per row; the same as logprobs._chunk_forward/_backward):
  lse = log sum_v exp z_v;  logp = z_tgt - lse;  H = lse - sum_v p_v z_v,  p = exp(z - lse)
  dz_v = g_logp * ([v = tgt] - p_v) - g_H * p_v * (log p_v + H);  d logits = dz / temperature
Does not cover: the chunking, the matmuls or autograd (training.logprobs).
Tested on the CPU under TRITON_INTERPRET=1 against the eager chunk functions; GPU: tests/gpu.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["grad_logits_", "logprobs_lse_entropy"]

Tensor = torch.Tensor


@triton.jit
def _forward_kernel(z_ptr, tgt_ptr, logp_ptr, lse_ptr, ent_ptr, V, stride, inv_temp,
                    WANT_ENT: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0)
    base = z_ptr + row.to(tl.int64) * stride
    m = float("-inf")  # running max, sum of exp(z - m), sum of exp(z - m) * z (online)
    s = 0.0
    t = 0.0
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        ok = cols < V
        z = tl.load(base + cols, mask=ok, other=float("-inf")).to(tl.float32) * inv_temp
        m_new = tl.maximum(m, tl.max(z, 0))
        scale = tl.exp(m - m_new)
        e = tl.exp(z - m_new)  # 0 where masked
        s = s * scale + tl.sum(e, 0)
        if WANT_ENT:
            t = t * scale + tl.sum(e * tl.where(ok, z, 0.0), 0)
        m = m_new
    lse = m + tl.log(s)
    z_tgt = tl.load(base + tl.load(tgt_ptr + row)).to(tl.float32) * inv_temp
    tl.store(lse_ptr + row, lse)
    tl.store(logp_ptr + row, z_tgt - lse)
    if WANT_ENT:
        tl.store(ent_ptr + row, lse - t / s)


@triton.jit
def _grad_kernel(z_ptr, tgt_ptr, lse_ptr, glogp_ptr, ent_ptr, gent_ptr, V, stride, inv_temp,
                 HAS_ENT: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < V
    ptrs = z_ptr + row.to(tl.int64) * stride + cols
    z = tl.load(ptrs, mask=ok, other=0.0).to(tl.float32) * inv_temp
    g_logp = tl.load(glogp_ptr + row)
    logsm = z - tl.load(lse_ptr + row)
    p = tl.exp(logsm)
    g = -p * g_logp
    if HAS_ENT:
        g = g - (tl.load(gent_ptr + row) * p) * (logsm + tl.load(ent_ptr + row))
    g = g + tl.where(cols == tl.load(tgt_ptr + row), g_logp, 0.0)
    tl.store(ptrs, (g * inv_temp).to(z_ptr.dtype.element_ty), mask=ok)


def logprobs_lse_entropy(
    z_cv: Tensor, tgt_c: Tensor, inv_temp: float, want_ent: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """(logp [c], lse [c], entropy [c] or [0]) in fp32 from logits `z_cv` [c, V] (any float
    dtype, unit stride along V) at temperature 1 / inv_temp; targets must be valid ids."""
    c, vocab = z_cv.shape
    logp = torch.empty(c, dtype=torch.float32, device=z_cv.device)
    lse = torch.empty_like(logp)
    ent = torch.empty(c if want_ent else 0, dtype=torch.float32, device=z_cv.device)
    if c:
        _forward_kernel[(c,)](
            z_cv, tgt_c, logp, lse, ent if want_ent else logp, vocab, z_cv.stride(0),
            float(inv_temp), WANT_ENT=want_ent, BLOCK=4096, num_warps=8,
        )  # fmt: skip
    return logp, lse, ent


def grad_logits_(
    z_cv: Tensor,
    tgt_c: Tensor,
    lse_c: Tensor,
    g_logp_c: Tensor,
    ent: tuple[Tensor, Tensor] | None,
    inv_temp: float,
) -> Tensor:
    """Overwrite logits `z_cv` [c, V] with the gradient of sum(g_logp * logp) (+ sum(g_ent *
    entropy) when `ent` = (entropy, g_ent)) with respect to them; returns `z_cv`."""
    c, vocab = z_cv.shape
    if c:
        ent_c, g_ent_c = ent if ent is not None else (lse_c, lse_c)
        block = 4096
        _grad_kernel[(c, triton.cdiv(vocab, block))](
            z_cv, tgt_c, lse_c, g_logp_c, ent_c, g_ent_c, vocab, z_cv.stride(0),
            float(inv_temp), HAS_ENT=ent is not None, BLOCK=block, num_warps=8,
        )  # fmt: skip
    return z_cv
