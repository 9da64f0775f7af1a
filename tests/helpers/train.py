"""Helpers for the trainer tests: tiny Qwen3 / Qwen3-MoE models made in code, random episodes.

The `one_thread` fixture these tests use is in tests/conftest.py."""

from __future__ import annotations

import torch

from tritonforge.types import Trajectory, Turn

VOCAB = 512


def tiny_lm(moe: bool = False, seed: int = 0, head_dim: int = 16) -> torch.nn.Module:
    from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    common = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=head_dim, intermediate_size=128)  # fmt: skip
    torch.manual_seed(seed)
    if moe:
        cfg = Qwen3MoeConfig(
            moe_intermediate_size=64, num_experts=4, num_experts_per_tok=2, **common
        )
        return Qwen3MoeForCausalLM(cfg).float()
    return Qwen3ForCausalLM(Qwen3Config(**common)).float()


def trajectories(n: int = 6, seed: int = 0, version: int = 0) -> list[Trajectory]:
    """Random two-turn episodes: prompt, response 1, feedback, response 2."""
    g = torch.Generator().manual_seed(seed)

    def rand(k: int) -> list[int]:
        return torch.randint(0, VOCAB, (k,), generator=g).tolist()

    out = []
    for i in range(n):
        p, r1, f, r2 = (int(x) for x in torch.randint(3, 12, (4,), generator=g))
        ids = rand(p + r1 + f + r2)
        mask = [0] * p + [1] * r1 + [0] * f + [1] * r2
        a1, a2 = (float(x) for x in torch.randn(2, generator=g))
        adv = [0.0] * p + [a1] * r1 + [0.0] * f + [a2] * r2
        lp = [-float(torch.rand(1, generator=g)) * 6 * m for m in mask]
        turns = [
            Turn(index=0, prompt_len=p, response_ids=ids[p : p + r1], response_logprobs=lp[p : p + r1],
                 response_text="", code=None),
            Turn(index=1, prompt_len=p + r1 + f, response_ids=ids[p + r1 + f :],
                 response_logprobs=lp[p + r1 + f :], response_text="", code=None),
        ]  # fmt: skip
        out.append(Trajectory(problem_id=f"p{i}", prompt_ids=ids[:p], token_ids=ids, loss_mask=mask,
                              rollout_logprobs=lp, advantages=adv, turns=turns, policy_version=version))  # fmt: skip
    return out


def lm_head_case(vocab: int = 5000, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """An lm-head case over a vocabulary that is not a multiple of the Triton kernels' blocks:
    (hidden [2, 45, 24] fp32, weight [vocab, 24] bf16, both requiring grad, targets [2, 45]
    with six ignored, upstream gradients of log-probs and entropies [2, 45])."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(2, 45, 24, generator=g).requires_grad_(True)
    weight = (torch.randn(vocab, 24, generator=g) * 0.3).bfloat16().requires_grad_(True)
    targets = torch.randint(0, vocab, (2, 45), generator=g)
    targets[0, :6] = -100
    g_logp, g_ent = torch.randn(2, 45, generator=g), torch.randn(2, 45, generator=g)
    return hidden, weight, targets, g_logp, g_ent
