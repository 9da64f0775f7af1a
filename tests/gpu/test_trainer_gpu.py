"""The trainer on a CUDA device: bf16 log-probs against full logits, and a bf16 RL step.

Run on the GPU machine: `pytest -m gpu tests/gpu/test_trainer_gpu.py`.
"""

from __future__ import annotations

import math

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_bf16_policy_logprobs_match_full_logits_on_cuda():
    from helpers.train import tiny_lm, trajectories
    from tritonforge.config.train import BatchConfig
    from tritonforge.training.batching import collate, prepare_sequences
    from tritonforge.training.logprobs import token_logprobs_from_logits
    from tritonforge.training.model import PolicyModel

    lm = tiny_lm().cuda()
    seqs, _ = prepare_sequences(trajectories(4, seed=2), BatchConfig())
    mb = collate(seqs).to("cuda")
    policy = PolicyModel(lm, chunk_tokens=16, compute_dtype=torch.bfloat16)
    with torch.no_grad():
        logp, _ = policy(mb)
        with torch.autocast("cuda", torch.bfloat16):
            logits = lm(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits
        ref = token_logprobs_from_logits(logits.float(), mb.targets)
    scored = mb.targets >= 0
    torch.testing.assert_close(logp[scored], ref[scored], atol=0.05, rtol=0.02)


def test_bf16_rl_steps_with_checkpointing_on_cuda():
    from helpers.train import tiny_lm, trajectories
    from tritonforge.config.train import TrainerConfig
    from tritonforge.training.rl import RLTrainer

    cfg = TrainerConfig.model_validate({
        "model": {"dtype": "bf16", "gradient_checkpointing": True},
        "optim": {"lr": 1e-3},
        "batch": {"micro_batch_tokens": 64, "chunk_tokens": 16},
    })  # fmt: skip
    trainer = RLTrainer(cfg, model=tiny_lm())
    assert trainer.ctx.device.type == "cuda"
    for step in range(3):
        m = trainer.train_step(trajectories(6, seed=step))
        assert math.isfinite(m.loss) and math.isfinite(m.grad_norm) and m.grad_norm > 0
