"""Token log-probs (and entropies) from hidden states without full-vocabulary fp32 logits.

Covers: `chunked_token_logprobs`, which walks the tokens in chunks, computes each chunk's logits
in the lm-head weight's dtype, upcasts only that chunk to fp32 for logsumexp/softmax, and in
backward recomputes the chunk's logits (a custom autograd Function), so memory beyond the inputs
is O(chunk_tokens * V), never O(B * T * V); and `token_logprobs_from_logits` /
`entropy_from_logits` for small cases where logits already exist.
Does not cover: running the model body, shifting inputs to targets (the caller passes
`targets[b, t]` = the token predicted from `hidden[b, t]`), or unsharding FSDP weights (call this
where the lm-head weight is a full tensor).

Targets < 0 (e.g. -100 for prompt, feedback and padding positions) are ignored: their log-prob
and entropy are 0, they get no gradient and cost no compute.
"""

from __future__ import annotations

import torch

__all__ = ["chunked_token_logprobs", "entropy_from_logits", "token_logprobs_from_logits"]

Tensor = torch.Tensor


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for half types, else the dtype itself (float64 stays float64 for gradchecks)."""
    return torch.promote_types(dtype, torch.float32)


def _chunk_logits(h_ch: Tensor, weight_vh: Tensor, temperature: float, cd: torch.dtype) -> Tensor:
    """[c, V] logits / temperature: matmul in the weight dtype, result upcast to `cd` (fresh tensor)."""
    z_cv = (h_ch.to(weight_vh.dtype) @ weight_vh.t()).to(cd)
    if temperature != 1.0:
        z_cv.div_(temperature)
    return z_cv


class _ChunkedLogprobs(torch.autograd.Function):
    """logp[n] = log softmax(hidden[n] @ W^T / temp)[target[n]] (+ entropy[n]), chunked over n.

    Saves only the inputs plus two [N] vectors (logsumexp, entropy); backward recomputes logits.
    All targets must be valid ids (the wrapper drops ignored positions).
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
    ) -> tuple[Tensor, Tensor]:
        cd = _compute_dtype(weight_vh.dtype)
        n = hidden_nh.shape[0]
        logp_n = hidden_nh.new_empty(n, dtype=cd)
        lse_n = hidden_nh.new_empty(n, dtype=cd)
        ent_n = hidden_nh.new_empty(n if compute_entropy else 0, dtype=cd)
        for s in range(0, n, chunk_tokens):
            e = min(s + chunk_tokens, n)
            z_cv = _chunk_logits(hidden_nh[s:e], weight_vh, temperature, cd)
            lse_c = torch.logsumexp(z_cv, dim=-1)
            z_cv.sub_(lse_c[:, None])  # now log-softmax
            logp_n[s:e] = z_cv.gather(1, targets_n[s:e, None]).squeeze(1)
            lse_n[s:e] = lse_c
            if compute_entropy:
                p_cv = z_cv.exp()
                ent_n[s:e] = -p_cv.mul_(z_cv).sum(-1)
        ctx.save_for_backward(hidden_nh, weight_vh, targets_n, lse_n, ent_n)
        ctx.chunk_tokens = chunk_tokens
        ctx.temperature = temperature
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
        d_weight_vh = (
            torch.zeros(weight_vh.shape, dtype=cd, device=weight_vh.device) if need_w else None
        )
        for s in range(0, hidden_nh.shape[0], ctx.chunk_tokens):
            e = min(s + ctx.chunk_tokens, hidden_nh.shape[0])
            h_ch = hidden_nh[s:e]
            g_c = _chunk_dlogits(
                _chunk_logits(h_ch, weight_vh, ctx.temperature, cd),
                lse_n[s:e],
                targets_n[s:e],
                g_logp_n[s:e].to(cd),
                (ent_n[s:e], g_ent_n[s:e].to(cd)) if use_ent else None,
            )
            g_c.div_(ctx.temperature)
            g_cv = g_c.to(weight_vh.dtype)
            if d_hidden_nh is not None:
                d_hidden_nh[s:e] = (g_cv @ weight_vh).to(hidden_nh.dtype)
            if d_weight_vh is not None and weight_vh.dtype == cd:
                d_weight_vh.addmm_(g_cv.t(), h_ch.to(cd))
            elif d_weight_vh is not None:  # half weights: matmul in bf16/fp16, accumulate in fp32
                d_weight_vh += (g_cv.t() @ h_ch.to(weight_vh.dtype)).to(cd)
        d_weight = d_weight_vh.to(weight_vh.dtype) if d_weight_vh is not None else None
        return d_hidden_nh, d_weight, None, None, None, None


def _chunk_dlogits(
    z_cv: Tensor, lse_c: Tensor, tgt_c: Tensor, g_logp_c: Tensor, ent: tuple[Tensor, Tensor] | None
) -> Tensor:
    """d loss / d (logits/temp) of one chunk, in place on `z_cv`'s buffers.

    d logp[tgt] / dz = onehot(tgt) - p;  d H / dz = -p * (log p + H).
    """
    logsm_cv = z_cv.sub_(lse_c[:, None])
    p_cv = logsm_cv.exp()
    if ent is not None:
        ent_c, g_ent_c = ent
        # logsm_cv becomes the entropy term g_H * p * (log p + H)
        logsm_cv.add_(ent_c[:, None]).mul_(p_cv).mul_(g_ent_c[:, None])
        g_cv = p_cv.mul_(-g_logp_c[:, None]).sub_(logsm_cv)
    else:
        g_cv = p_cv.mul_(-g_logp_c[:, None])
    return g_cv.scatter_add_(1, tgt_c[:, None], g_logp_c[:, None])


def chunked_token_logprobs(
    hidden: Tensor,
    lm_head_weight: Tensor,
    targets: Tensor,
    chunk_tokens: int = 1024,
    temperature: float = 1.0,
    compute_entropy: bool = False,
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
    hidden_nh, targets_n = hidden.reshape(b * t, h), targets.reshape(b * t).long()
    if targets_n.numel() and int(targets_n.max()) >= vocab:
        raise ValueError(f"target id {int(targets_n.max())} is outside the vocabulary of {vocab}")
    valid_n = targets_n >= 0
    if bool(valid_n.all()):
        logp_n, ent_n = _ChunkedLogprobs.apply(
            hidden_nh, lm_head_weight, targets_n, chunk_tokens, temperature, compute_entropy
        )
    else:
        idx_k = valid_n.nonzero().squeeze(1)  # [K] positions that are scored
        h_kh = hidden_nh.index_select(0, idx_k)
        logp_k, ent_k = _ChunkedLogprobs.apply(
            h_kh, lm_head_weight, targets_n[idx_k], chunk_tokens, temperature, compute_entropy
        )
        logp_n = logp_k.new_zeros(b * t).index_copy(0, idx_k, logp_k)
        ent_n = ent_k.new_zeros(b * t).index_copy(0, idx_k, ent_k) if compute_entropy else ent_k
    entropy = ent_n.view(b, t) if compute_entropy else None
    return logp_n.view(b, t), entropy


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
