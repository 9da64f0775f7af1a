"""Long-position helpers for the rotary-precision tests (tests/unit/test_model_cast.py on CPU,
tests/gpu/test_train_fast_gpu.py on CUDA): a tiny Qwen3 with Qwen3's rope theta, and the
trainer's bf16-parameter path against the fp32-master path on one long sample."""

from __future__ import annotations

from typing import Any

import torch

from helpers.train import VOCAB

ROTARY = ["model.rotary_emb.inv_freq", "model.rotary_emb.original_inv_freq"]


def long_lm(seed: int = 0) -> torch.nn.Module:
    """A tiny Qwen3 with Qwen3's rope theta (1e6) and head dim 64, for long positions; weights
    ten times the usual scale, so attention moves the log-probs visibly."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=64, intermediate_size=128,
                      rope_theta=1e6, max_position_embeddings=8192, initializer_range=0.2)  # fmt: skip
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(cfg).float()


def trainer_config(length: int, **batch: Any) -> Any:
    """bf16 parameters with fp32 masters in the optimizer; one sample of `length` per step."""
    from tritonforge.config.train import TrainerConfig

    return TrainerConfig.model_validate({
        "model": {"dtype": "bf16", "master_weights": "optimizer", "compile": "off"},
        "batch": {"micro_batch_tokens": length, "max_seq_len": length + 1, "chunk_tokens": 1024,
                  **batch},
    })  # fmt: skip


def _logp_and_grads(policy, mbs: list, lm: torch.nn.Module, device) -> tuple[torch.Tensor, dict]:
    """Per-token log-probs of the one sample, and every gradient (fp32) of a weighted NLL."""
    for mb in mbs:
        mb = mb.to(device)
        logp = policy(mb, 1.0, False)[0]
        w = mb.mask * (1 + 0.5 * mb.advantages)
        (-(logp * w).sum() / w.sum()).backward()
    return logp[0].detach().float().cpu(), {n: p.grad.float() for n, p in lm.named_parameters()}


def _grad_rel(got: dict, want: dict) -> float:
    num = sum(float((got[n] - want[n]).norm() ** 2) for n in want)
    return (num / sum(float(g.norm() ** 2) for g in want.values())) ** 0.5


def bf16_vs_fp32_masters(
    length: int, rounded: bool, model: dict | None = None, batch: dict | None = None
) -> dict[str, float]:
    """One `length`-token sample through the trainer's bf16-parameter path (TrainCore: packed,
    fp32 masters in the optimizer; `model` and `batch` override its config sections, e.g.
    compile, lm_head) against
    the same weights as fp32 parameters under bf16 autocast (the fp32-master path), on the
    trainer's device. `rounded`: the trainer's rotary frequencies rounded to bf16 first (what
    `Module.to` did). Mean absolute log-prob error early (positions 64-256) and late (the
    second half), and the global relative gradient error."""
    from tritonforge.training.batching import TrainSequence, collate
    from tritonforge.training.core import TrainCore
    from tritonforge.training.model import PolicyModel

    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, VOCAB, (length + 1,), generator=g).tolist()
    seq = TrainSequence(ids, [0] * 64 + [1] * (length - 63), [1.0] * (length + 1), None, 0, 0)
    cfg = trainer_config(length, **(batch or {}))
    cfg.model = cfg.model.model_copy(update=model or {})
    core = TrainCore(cfg.model, cfg.optim, cfg.batch, cfg.dist, lm=long_lm())
    dev = core.ctx.device
    ref = PolicyModel(long_lm().to(dev), 1024, torch.bfloat16)
    want_logp, want_grad = _logp_and_grads(ref, [collate([seq])], ref.lm, dev)
    if rounded:
        rope = core.lm.model.rotary_emb
        rope.inv_freq = rope.inv_freq.bfloat16()
        rope.original_inv_freq = rope.original_inv_freq.bfloat16()
    logp, grad = _logp_and_grads(core.policy, core.micro_batches([seq]), core.lm, dev)
    d = (logp - want_logp).abs()
    return {"early": float(d[64:256].mean()), "late": float(d[length // 2 : length].mean()),
            "grad_rel": _grad_rel(grad, want_grad)}  # fmt: skip
