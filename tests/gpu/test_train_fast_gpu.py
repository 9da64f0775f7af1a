"""The fast trainer path on a CUDA device: every packed attention kernel against per-sample
attention, the packed + compiled (inductor) + checkpointed path against the padded eager one in
bf16, bounded recompiles with varlen attention, and RL steps with the default GPU settings.

Run on the GPU machine: `pytest -m gpu tests/gpu/test_train_fast_gpu.py`.
"""

from __future__ import annotations

import math

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
CUDA = torch.device("cuda")


def _row(lengths: list[int]):
    from tritonforge.training.packing import PackedInputs

    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(lengths).cumsum(0)
    ids = torch.zeros(1, sum(lengths), dtype=torch.long)
    uniform = lengths[0] if len(set(lengths)) == 1 else 0
    return PackedInputs(ids, ids.clone(), cu, max(lengths), uniform).to(CUDA)


@pytest.mark.parametrize("backend", ["varlen", "flex", "loop", "sdpa", "sdpa_cudnn", "sdpa_flash"])
def test_packed_attention_kernels_match_per_sample_attention(backend):
    from tritonforge.training import attention

    if not attention.available(backend, CUDA):
        pytest.skip(f"{backend} is not available with this torch")
    lengths = [256] * 4 if backend.startswith("sdpa") else [200, 1000, 77, 571]
    row = _row(lengths)
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, row.num_tokens, h, 128, generator=g).cuda().bfloat16().transpose(1, 2)
        for h in (16, 8, 8)
    )
    q, k, v = (x.requires_grad_(True) for x in (q, k, v))
    ref_in = [x.detach().float().requires_grad_(True) for x in (q, k, v)]
    fn = attention.PACKED_ATTENTION[backend]
    if backend == "flex":
        fn = torch.compile(fn)
    out = fn(q, k, v, attention.packing_kwargs(row, backend), 128**-0.5)
    ref_kw = attention.packing_kwargs(row, "loop")
    ref = attention.PACKED_ATTENTION["loop"](*ref_in, ref_kw, 128**-0.5)
    grad = torch.randn_like(ref)
    out.backward(grad.bfloat16())
    ref.backward(grad)
    for a, b in [(out, ref), *((x.grad, y.grad) for x, y in zip((q, k, v), ref_in))]:
        err = (a.float() - b).abs().max() / b.abs().max()
        assert err < 3e-2, (backend, float(err))


def _loss_grads(policy, mb):
    logp, ent = policy(mb.to(CUDA), 1.0, True)
    w = mb.mask.to(CUDA) * (1 + 0.5 * mb.advantages.to(CUDA))
    loss = -(logp * w).sum() / w.numel() + 0.01 * ent.sum() / w.numel()
    loss.backward()
    grads = {n: p.grad.float().clone() for n, p in policy.lm.named_parameters()}
    policy.lm.zero_grad(set_to_none=True)
    return float(loss), logp.detach(), grads


@pytest.mark.parametrize(
    "moe,lengths,compiled",
    [(False, [40, 97, 13, 64], True), (False, [64, 64, 64], True), (True, [40, 97, 13, 64], False)],
)
def test_packed_compiled_checkpointed_path_matches_padded_eager(moe, lengths, compiled):
    """Varlen rows and uniform (dense SDPA) rows, compiled with inductor and one layer
    checkpointed; the MoE model packed but eager (its compiled path: CPU tests, aot_eager)."""
    from helpers.train import VOCAB, tiny_lm
    from tritonforge.training.batching import TrainSequence, collate
    from tritonforge.training.logprobs import EAGER, compiled_ops
    from tritonforge.training.model import PolicyModel, accelerate_layers
    from tritonforge.training.packing import pack_micro_batch

    g = torch.Generator().manual_seed(5)
    seqs = []
    for i, n in enumerate(lengths):
        ids = torch.randint(0, VOCAB, (n + 1,), generator=g).tolist()
        mask = [0] * 4 + [1] * (n - 3)
        seqs.append(TrainSequence(ids, mask, [float(i % 2) - 0.5] * (n + 1), None, 0, i))
    lm_ref, lm_fast = tiny_lm(moe).cuda(), tiny_lm(moe).cuda()
    ref = _loss_grads(PolicyModel(lm_ref, 32, torch.bfloat16), collate(seqs))
    accelerate_layers(lm_fast, compiled, [1])
    head = compiled_ops() if compiled else EAGER
    fast_policy = PolicyModel(lm_fast, 32, torch.bfloat16, packing=True, head_ops=head)
    fast_policy.layers_compiled = compiled
    fast = _loss_grads(fast_policy, pack_micro_batch(seqs, 0, 64))
    assert abs(fast[0] - ref[0]) < 1e-2 * abs(ref[0]) + 1e-3
    scored = collate(seqs).mask.cuda() > 0
    assert (fast[1] - ref[1])[scored].abs().mean() < 2e-2
    num = sum(float((fast[2][n] - ref[2][n]).pow(2).sum()) for n in ref[2])
    den = sum(float(ref[2][n].pow(2).sum()) for n in ref[2])
    assert math.sqrt(num / den) < 6e-2


def test_varlen_recompiles_stop_after_shapes_become_dynamic():
    from torch._dynamo.utils import counters

    from helpers.train import tiny_lm, trajectories
    from tritonforge.config.train import BatchConfig
    from tritonforge.training.batching import prepare_sequences
    from tritonforge.training.logprobs import compiled_ops
    from tritonforge.training.model import PolicyModel, accelerate_layers
    from tritonforge.training.packing import pack_micro_batch

    torch._dynamo.reset()
    counters.clear()
    lm = tiny_lm().cuda()
    accelerate_layers(lm, True, [0])
    policy = PolicyModel(lm, 32, torch.bfloat16, packing=True, head_ops=compiled_ops())
    policy.layers_compiled = True
    graphs = []
    for step in range(8):
        seqs, _ = prepare_sequences(trajectories(3 + step % 3, seed=step), BatchConfig())
        policy(pack_micro_batch(seqs, 0, 16).to(CUDA), 1.0, True)[0].sum().backward()
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[-4] == graphs[-1], graphs
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])


def test_rl_steps_with_default_gpu_settings_are_finite_and_fused():
    from helpers.train import tiny_lm, trajectories
    from tritonforge.config.train import TrainerConfig
    from tritonforge.training.rl import RLTrainer

    cfg = TrainerConfig.model_validate({
        "model": {"dtype": "bf16", "gradient_checkpointing": True, "checkpoint_layers": 1},
        "optim": {"lr": 1e-3},
        "batch": {"micro_batch_tokens": 96, "chunk_tokens": 16},
    })  # fmt: skip
    trainer = RLTrainer(cfg, model=tiny_lm())
    assert trainer.core.compiled and trainer.core.policy.packing
    assert trainer.core.optimizer.defaults["fused"] is True
    for step in range(3):
        m = trainer.train_step(trajectories(6, seed=step))
        assert math.isfinite(m.loss) and math.isfinite(m.grad_norm) and m.grad_norm > 0
