"""RL policy losses: a registry of small pure functions over per-token tensors.

Covers: the clipped surrogates (GRPO with DAPO clip-higher, Dr.GRPO, GSPO), truncated importance
sampling against the inference engine's log-probs (TIS), KL penalties (k1/k2/k3) to a reference
policy, the entropy bonus, the loss aggregation modes, and the metrics each loss reports.
Does not cover: computing log-probs (training.logprobs), advantages and group normalisation
(buffer; training.advantages broadcasts per-turn values), micro-batching or the optimizer.

Every loss maps `(LossInputs, LossConfig) -> (loss scalar, metrics)`. All tensors are `[B, T]`;
positions with `mask == 0` never affect the loss or its gradients (they may hold any value, even
NaN/inf). Metrics are detached 0-d tensors so a trainer can accumulate them without a device sync.

Micro-batching: pass `num_tokens` / `num_seqs` (the counts of the whole optimizer step, summed over
micro-batches and data-parallel ranks) so that summing micro-batch losses gives exactly the
full-batch loss; left unset they are counted from this batch's mask.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tritonforge.config.registry import Registry
from tritonforge.config.train import LOSSES, LossConfig

__all__ = [
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "LOSSES",
    "LossConfig",
    "LossFn",
    "LossInputs",
    "LossMetrics",
    "aggregate",
    "clipped_surrogate",
    "compute_loss",
    "get_loss",
    "needs_reference",
    "register_loss",
]

Tensor = torch.Tensor
LossMetrics = dict[str, Tensor]
Count = float | torch.Tensor
Counts = tuple[torch.Tensor, Count, Count]  # (tokens per sequence [B], tokens, sequences)
# LossConfig lives in tritonforge.config.train (torch-free) and is re-exported here.


@dataclass(frozen=True)
class LossInputs:
    """Per-token inputs of one (micro-)batch; every tensor is `[B, T]`.

    logp: current policy log-probs (with grad). old_logp: the policy clipped against (for the first
    on-policy step `logp.detach()`). rollout_logp: what the inference engine reported (needed by
    TIS; used for the logprob-gap metric). advantages: per token. mask: 1 on model tokens.
    num_tokens / num_seqs: global normalisers for micro-batching (see module docstring).
    """

    logp: Tensor
    old_logp: Tensor
    advantages: Tensor
    mask: Tensor
    rollout_logp: Tensor | None = None
    ref_logp: Tensor | None = None
    entropy: Tensor | None = None
    num_tokens: float | Tensor | None = None
    num_seqs: float | Tensor | None = None

    def __post_init__(self) -> None:
        if self.logp.dim() != 2:
            raise ValueError(f"logp must be [B, T], got shape {tuple(self.logp.shape)}")
        for name in ("old_logp", "advantages", "mask", "rollout_logp", "ref_logp", "entropy"):
            value = getattr(self, name)
            if value is not None and value.shape != self.logp.shape:
                raise ValueError(
                    f"{name} shape {tuple(value.shape)} != logp shape {tuple(self.logp.shape)}"
                )


LossFn = Callable[[LossInputs, LossConfig], tuple[Tensor, LossMetrics]]
# LOSSES (config.train, torch-free, so that LossConfig checks names without importing torch)
# names the built-in losses lazily; each is registered here by its decorator.


def register_loss(name: str) -> Callable[[LossFn], LossFn]:
    """Decorator adding a loss to `LOSSES` under `name` (names are unique)."""
    return LOSSES.register(name)


def get_loss(name: str) -> LossFn:
    """The registered loss `name`; UnknownName (a ValueError) naming the known ones otherwise."""
    return LOSSES.lookup(name)


def compute_loss(inputs: LossInputs, config: LossConfig) -> tuple[Tensor, LossMetrics]:
    """Run the loss named by `config.type`."""
    return get_loss(config.type)(inputs, config)


def needs_reference(config: LossConfig) -> bool:
    """Whether the trainer must load a reference model (only for a non-zero KL weight)."""
    return config.kl_coef > 0


# ----------------------------------------------------------------------------------------------
# Aggregation: [B, T] per-token values -> scalar
# ----------------------------------------------------------------------------------------------


def _counts(mask_bt: Tensor, num_tokens: Count | None, num_seqs: Count | None) -> Counts:
    tok_b = mask_bt.sum(-1)  # [B] model tokens per sequence
    n_tok = num_tokens if num_tokens is not None else tok_b.sum().clamp(min=1)
    n_seq = num_seqs if num_seqs is not None else (tok_b > 0).sum().clamp(min=1)
    return tok_b, n_tok, n_seq


def _agg_token_mean(x_bt: Tensor, mask_bt: Tensor, n: Counts, constant: float) -> Tensor:
    _, n_tok, _ = n
    return x_bt.sum() / n_tok


def _agg_seq_mean_token_sum(x_bt: Tensor, mask_bt: Tensor, n: Counts, constant: float) -> Tensor:
    _, _, n_seq = n
    return x_bt.sum() / n_seq


def _agg_seq_mean_token_mean(x_bt: Tensor, mask_bt: Tensor, n: Counts, constant: float) -> Tensor:
    tok_b, _, n_seq = n
    return (x_bt.sum(-1) / tok_b.clamp(min=1)).sum() / n_seq


def _agg_constant_norm(x_bt: Tensor, mask_bt: Tensor, n: Counts, constant: float) -> Tensor:
    _, _, n_seq = n
    return x_bt.sum() / (n_seq * constant)


AGGREGATIONS: Registry[Callable[[Tensor, Tensor, Counts, float], Tensor]] = Registry(
    "loss aggregation",
    {
        "token_mean": _agg_token_mean,  # sum over all tokens / tokens
        "seq_mean_token_sum": _agg_seq_mean_token_sum,  # mean over sequences of token sums
        "seq_mean_token_mean": _agg_seq_mean_token_mean,  # mean over sequences of token means
        "constant_norm": _agg_constant_norm,  # Dr.GRPO: sum / (sequences * constant)
    },
)


def aggregate(
    x_bt: Tensor,
    mask_bt: Tensor,
    mode: str,
    norm_constant: float = 1.0,
    num_tokens: float | Tensor | None = None,
    num_seqs: float | Tensor | None = None,
) -> Tensor:
    """Reduce per-token values `x_bt` over `mask_bt` (bool) with `mode`; empty sequences don't count."""
    x_bt = torch.where(mask_bt, x_bt, torch.zeros_like(x_bt))
    return AGGREGATIONS[mode](x_bt, mask_bt, _counts(mask_bt, num_tokens, num_seqs), norm_constant)


# ----------------------------------------------------------------------------------------------
# Shared pieces
# ----------------------------------------------------------------------------------------------


def _zero_masked(x_bt: Tensor, mask_bt: Tensor) -> Tensor:
    return torch.where(mask_bt, x_bt, torch.zeros_like(x_bt))


def _masked_mean(x_bt: Tensor, mask_bt: Tensor) -> Tensor:
    return (_zero_masked(x_bt, mask_bt).sum() / mask_bt.sum().clamp(min=1)).detach().float()


def clipped_surrogate(
    ratio_bt: Tensor, adv_bt: Tensor, clip_low: float, clip_high: float
) -> tuple[Tensor, Tensor]:
    """PPO surrogate `max(-A r, -A clip(r, 1-low, 1+high))` per token, and where the clip binds."""
    unclipped_bt = -adv_bt * ratio_bt
    clipped_bt = -adv_bt * ratio_bt.clamp(1.0 - clip_low, 1.0 + clip_high)
    return torch.maximum(unclipped_bt, clipped_bt), clipped_bt > unclipped_bt


def _log_ratio(a_bt: Tensor, b_bt: Tensor, mask_bt: Tensor, clamp: float) -> Tensor:
    return _zero_masked(a_bt - b_bt, mask_bt).clamp(-clamp, clamp)


def _seq_mean(x_bt: Tensor, mask_bt: Tensor) -> Tensor:
    """[B] mean of x over each sequence's masked tokens (x already zero where masked)."""
    return x_bt.sum(-1) / mask_bt.sum(-1).clamp(min=1)


def _kl_k1(logp_bt: Tensor, ref_bt: Tensor) -> Tensor:
    return logp_bt - ref_bt


def _kl_k2(logp_bt: Tensor, ref_bt: Tensor) -> Tensor:
    return 0.5 * (logp_bt - ref_bt) ** 2


def _kl_k3(logp_bt: Tensor, ref_bt: Tensor) -> Tensor:
    d_bt = ref_bt - logp_bt
    return torch.exp(d_bt) - d_bt - 1.0


KL_ESTIMATORS: Registry[Callable[[Tensor, Tensor], Tensor]] = Registry(
    "KL estimator", {"k1": _kl_k1, "k2": _kl_k2, "k3": _kl_k3}
)


def _tis_weight(inp: LossInputs, mask_bt: Tensor, cfg: LossConfig) -> tuple[Tensor, LossMetrics]:
    """Detached `min(pi_old / pi_rollout, C)` per token (or per sequence), zero where masked."""
    if inp.rollout_logp is None:
        raise ValueError(f"loss {cfg.type!r} needs rollout_logp (the engine's log-probs)")
    log_w_bt = _zero_masked(inp.old_logp.detach() - inp.rollout_logp, mask_bt)
    if cfg.tis_level == "sequence":
        log_w_bt = _seq_mean(log_w_bt, mask_bt)[:, None].expand_as(log_w_bt)
    log_cap = math.log(cfg.tis_cap)
    w_bt = _zero_masked(torch.exp(log_w_bt.clamp(max=log_cap)), mask_bt).detach()
    capped = (log_w_bt > log_cap) & mask_bt
    metrics = {
        "tis_weight_mean": _masked_mean(w_bt, mask_bt),
        "tis_capped_fraction": _masked_mean(capped.float(), mask_bt),
    }
    return w_bt, metrics


def _finish(
    loss_bt: Tensor,
    ratio_bt: Tensor,
    clipped_bt: Tensor,
    inp: LossInputs,
    cfg: LossConfig,
    mode: str,
) -> tuple[Tensor, LossMetrics]:
    """Aggregate the policy loss, add KL and entropy terms, and collect the metrics."""
    mask_bt = inp.mask > 0

    def agg(x_bt: Tensor) -> Tensor:
        return aggregate(x_bt, mask_bt, mode, cfg.norm_constant, inp.num_tokens, inp.num_seqs)

    pg_loss = agg(loss_bt)
    total = pg_loss
    ratio_m = _zero_masked(ratio_bt.detach(), mask_bt)
    metrics: LossMetrics = {
        "pg_loss": pg_loss.detach().float(),
        "ratio_mean": _masked_mean(ratio_m, mask_bt),
        "ratio_max": ratio_m.max().float() if ratio_m.numel() else ratio_m.new_zeros(()),
        "clip_fraction": _masked_mean(clipped_bt.float(), mask_bt),
        "clip_high_fraction": _masked_mean((clipped_bt & (ratio_m > 1)).float(), mask_bt),
        "clip_low_fraction": _masked_mean((clipped_bt & (ratio_m < 1)).float(), mask_bt),
    }
    if cfg.kl_coef > 0 and inp.ref_logp is None:
        raise ValueError("kl_coef > 0 needs ref_logp (load the reference model)")
    if inp.ref_logp is not None:
        logp_m = _zero_masked(inp.logp, mask_bt)
        kl_bt = KL_ESTIMATORS[cfg.kl_type](logp_m, _zero_masked(inp.ref_logp, mask_bt))
        metrics["kl"] = _masked_mean(kl_bt.detach(), mask_bt)
        if cfg.kl_coef > 0:
            total = total + cfg.kl_coef * agg(kl_bt)
    if cfg.entropy_coef > 0 and inp.entropy is None:
        raise ValueError("entropy_coef > 0 needs entropy (compute_entropy=True)")
    if inp.entropy is not None:
        metrics["entropy"] = _masked_mean(inp.entropy.detach(), mask_bt)
        if cfg.entropy_coef > 0:
            total = total - cfg.entropy_coef * agg(inp.entropy)
    if inp.rollout_logp is not None:
        gap_bt = (inp.old_logp.detach() - inp.rollout_logp).abs()
        metrics["logprob_gap"] = _masked_mean(gap_bt, mask_bt)
    metrics["loss"] = total.detach().float()
    return total, metrics


# ----------------------------------------------------------------------------------------------
# Losses
# ----------------------------------------------------------------------------------------------


def _token_surrogate(inp: LossInputs, cfg: LossConfig) -> tuple[Tensor, Tensor, Tensor]:
    """Token-level clipped surrogate: (loss_bt, ratio_bt, clipped_bt)."""
    mask_bt = inp.mask > 0
    ratio_bt = torch.exp(_log_ratio(inp.logp, inp.old_logp, mask_bt, cfg.log_ratio_clamp))
    adv_bt = _zero_masked(inp.advantages, mask_bt)
    loss_bt, clipped_bt = clipped_surrogate(ratio_bt, adv_bt, cfg.clip_low, cfg.clip_high)
    return loss_bt, ratio_bt, clipped_bt


def _sequence_surrogate(inp: LossInputs, cfg: LossConfig) -> tuple[Tensor, Tensor, Tensor]:
    """GSPO-token surrogate: every token carries the sequence ratio s_i as its value and
    s_i * grad(logp_t) as its gradient, s_i = exp(mean_t(logp - old_logp)) (GSPO paper, eq. 9)."""
    mask_bt = inp.mask > 0
    log_r_bt = _log_ratio(inp.logp, inp.old_logp, mask_bt, cfg.log_ratio_clamp)
    seq_log_b = _seq_mean(log_r_bt, mask_bt)  # [B]
    logp_m = _zero_masked(inp.logp, mask_bt)
    tok_log_bt = seq_log_b.detach()[:, None] + logp_m - logp_m.detach()
    ratio_bt = torch.exp(
        _zero_masked(tok_log_bt, mask_bt).clamp(-cfg.log_ratio_clamp, cfg.log_ratio_clamp)
    )
    adv_bt = _zero_masked(inp.advantages, mask_bt)
    loss_bt, clipped_bt = clipped_surrogate(ratio_bt, adv_bt, cfg.gspo_clip_low, cfg.gspo_clip_high)
    return loss_bt, ratio_bt, clipped_bt


@register_loss("grpo")
def grpo_loss(inp: LossInputs, cfg: LossConfig) -> tuple[Tensor, LossMetrics]:
    """GRPO/DAPO: token-level clipped surrogate with asymmetric clip, `cfg.aggregation`."""
    loss_bt, ratio_bt, clipped_bt = _token_surrogate(inp, cfg)
    return _finish(loss_bt, ratio_bt, clipped_bt, inp, cfg, cfg.aggregation)


@register_loss("dr_grpo")
def dr_grpo_loss(inp: LossInputs, cfg: LossConfig) -> tuple[Tensor, LossMetrics]:
    """Dr.GRPO: GRPO surrogate with no length normalisation (always `constant_norm`).
    Its other half, advantages without std normalisation, is the buffer's setting."""
    loss_bt, ratio_bt, clipped_bt = _token_surrogate(inp, cfg)
    return _finish(loss_bt, ratio_bt, clipped_bt, inp, cfg, "constant_norm")


@register_loss("grpo_tis")
def grpo_tis_loss(inp: LossInputs, cfg: LossConfig) -> tuple[Tensor, LossMetrics]:
    """GRPO with each token's loss times the detached TIS weight min(pi_old/pi_rollout, C)."""
    loss_bt, ratio_bt, clipped_bt = _token_surrogate(inp, cfg)
    w_bt, tis_metrics = _tis_weight(inp, inp.mask > 0, cfg)
    total, metrics = _finish(loss_bt * w_bt, ratio_bt, clipped_bt, inp, cfg, cfg.aggregation)
    return total, {**metrics, **tis_metrics}


@register_loss("gspo")
def gspo_loss(inp: LossInputs, cfg: LossConfig) -> tuple[Tensor, LossMetrics]:
    """GSPO: sequence-level ratio and clip (gspo_clip_*), always `seq_mean_token_mean`."""
    loss_bt, ratio_bt, clipped_bt = _sequence_surrogate(inp, cfg)
    return _finish(loss_bt, ratio_bt, clipped_bt, inp, cfg, "seq_mean_token_mean")


@register_loss("gspo_tis")
def gspo_tis_loss(inp: LossInputs, cfg: LossConfig) -> tuple[Tensor, LossMetrics]:
    """GSPO with the detached TIS weight (per token, or per sequence with tis_level='sequence')."""
    loss_bt, ratio_bt, clipped_bt = _sequence_surrogate(inp, cfg)
    w_bt, tis_metrics = _tis_weight(inp, inp.mask > 0, cfg)
    total, metrics = _finish(loss_bt * w_bt, ratio_bt, clipped_bt, inp, cfg, "seq_mean_token_mean")
    return total, {**metrics, **tis_metrics}
