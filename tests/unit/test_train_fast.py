"""The fast training path against the unpacked, uncompiled one: packing, compiled layers and lm
head, selective checkpointing, fused AdamW, device-side metrics, bounded recompiles."""

from __future__ import annotations

import math

import pytest
import torch

from helpers.train import tiny_lm, trajectories
from tritonforge.config.train import BatchConfig, SFTRunConfig, TrainerConfig
from tritonforge.training.batching import collate, prepare_sequences
from tritonforge.training.core import MetricSums
from tritonforge.training.distributed import DistContext
from tritonforge.training.logprobs import EAGER, compiled_ops
from tritonforge.training.model import PolicyModel, accelerate_layers, checkpoint_indices
from tritonforge.training.optim import build_optimizer
from tritonforge.training.packing import pack_micro_batch
from tritonforge.training.rl import RLTrainer

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def seqs(n: int = 5, seed: int = 1):
    return prepare_sequences(trajectories(n, seed=seed), BatchConfig())[0]


def loss_and_grads(policy: PolicyModel, mb, dtype_tol: bool = False):
    logp, ent = policy(mb, 0.8, compute_entropy=True)
    g = torch.Generator().manual_seed(3)
    w = torch.randn(logp.shape, generator=g) * mb.mask
    loss = (logp * w).sum() + 0.1 * (ent * mb.mask).sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in policy.lm.named_parameters() if p.grad is not None}
    policy.lm.zero_grad(set_to_none=True)
    return loss.detach(), logp.detach(), ent.detach(), grads


@pytest.mark.parametrize("moe", [False, True])
def test_packed_forward_and_gradients_equal_padded(moe):
    lm = tiny_lm(moe)
    batch = seqs()
    ref = loss_and_grads(PolicyModel(lm, 7), collate(batch))
    fast = loss_and_grads(PolicyModel(lm, 7, packing=True), pack_micro_batch(batch, 0, 16))
    for a, b in zip(fast[:3], ref[:3]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert fast[3].keys() == ref[3].keys() and len(ref[3]) == len(list(lm.parameters()))
    for name in ref[3]:
        torch.testing.assert_close(fast[3][name], ref[3][name], atol=1e-5, rtol=1e-4)


def test_packed_bf16_autocast_within_bf16_tolerance():
    lm = tiny_lm()
    batch = seqs(seed=2)
    ref = loss_and_grads(PolicyModel(lm, 7), collate(batch))  # fp32, padded
    fast = loss_and_grads(
        PolicyModel(lm, 7, torch.bfloat16, packing=True), pack_micro_batch(batch, 0, 16)
    )
    assert abs(float(fast[0] - ref[0])) < 2e-2 * abs(float(ref[0])) + 1e-2
    scored = collate(batch).mask > 0
    assert (fast[1] - ref[1])[scored].abs().mean() < 2e-2
    num = sum(float((fast[3][n] - ref[3][n]).pow(2).sum()) for n in ref[3])
    den = sum(float(ref[3][n].pow(2).sum()) for n in ref[3])
    assert math.sqrt(num / den) < 5e-2


def test_compiled_layers_checkpointing_and_head_match_eager():
    """aot_eager runs dynamo + AOTAutograd (the graph capture, checkpoint HOP and partitioning
    inductor gets) without codegen; inductor itself: test_compiled_head_with_inductor and GPU."""
    import torch._dynamo

    torch._dynamo.reset()
    lm_ref, lm_fast = tiny_lm(), tiny_lm()
    batch = seqs(seed=4)
    ref = loss_and_grads(PolicyModel(lm_ref, 7, packing=True), pack_micro_batch(batch, 0, 16))
    accelerate_layers(lm_fast, True, checkpoint_indices(2, 1), backend="aot_eager")
    fast_policy = PolicyModel(lm_fast, 7, packing=True, head_ops=compiled_ops("aot_eager"))
    fast = loss_and_grads(fast_policy, pack_micro_batch(batch, 0, 16))
    torch.testing.assert_close(fast[1], ref[1], atol=1e-5, rtol=1e-5)
    for name in ref[3]:
        torch.testing.assert_close(fast[3][name], ref[3][name], atol=1e-5, rtol=1e-4)
    # structure untouched: same parameter names and state dict keys
    assert list(lm_fast.state_dict()) == list(lm_ref.state_dict())


def test_compiled_checkpointed_layers_under_bf16_autocast():
    """fp32 master weights, bf16 autocast around compiled, checkpointed layers and the compiled
    head (the GPU default) against the padded eager path: bf16 tolerance."""
    batch = seqs(seed=3)
    ref = loss_and_grads(PolicyModel(tiny_lm(), 8, torch.bfloat16), collate(batch))
    lm = tiny_lm()
    accelerate_layers(lm, True, [0, 1], backend="aot_eager")
    policy = PolicyModel(lm, 8, torch.bfloat16, packing=True, head_ops=compiled_ops("aot_eager"))
    fast = loss_and_grads(policy, pack_micro_batch(batch, 0, 16))
    assert (fast[1] - ref[1]).abs().max() < 2e-2
    num = sum(float((fast[3][n] - ref[3][n]).pow(2).sum()) for n in ref[3])
    den = sum(float(ref[3][n].pow(2).sum()) for n in ref[3])
    assert math.sqrt(num / den) < 3e-2


def uniform_seqs(lengths=(64, 64, 64)):
    """Equally long sequences (one dense SDPA call per packed row), as the GPU test has them."""
    from tritonforge.training.batching import TrainSequence

    g = torch.Generator().manual_seed(5)
    out = []
    for i, n in enumerate(lengths):
        ids = torch.randint(0, 512, (n + 1,), generator=g).tolist()
        mask = [0] * 4 + [1] * (n - 3)
        out.append(TrainSequence(ids, mask, [float(i % 2) - 0.5] * (n + 1), None, 0, i))
    return out


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_uniform_rows_compiled_checkpointed_under_bf16_autocast_match_padded_eager(backend):
    """The path that failed on the H200 (uniform rows: dense SDPA; compiled layers, layer 1
    checkpointed; bf16 autocast; compiled head) against the padded eager model. The SDPA call
    runs eagerly between compiled pieces (training.attention): gradients must agree to bf16
    rounding, per parameter."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    batch = uniform_seqs()
    ref = loss_and_grads(PolicyModel(tiny_lm(), 32, torch.bfloat16), collate(batch))
    lm = tiny_lm()
    accelerate_layers(lm, True, [1], backend=backend)
    policy = PolicyModel(lm, 32, torch.bfloat16, packing=True, head_ops=compiled_ops(backend))
    mb = pack_micro_batch(batch, 0, 64)
    assert mb.packed.uniform_len == 64
    fast = loss_and_grads(policy, mb)
    assert (fast[1] - ref[1]).abs().max() < 2e-2
    for name in ref[3]:
        rel = float((fast[3][name] - ref[3][name]).norm() / ref[3][name].norm())
        assert rel < 3e-2, (name, rel)
    assert any("compiler.disable" in r for r in counters["graph_break"]), dict(counters)


@pytest.mark.slow
def test_recompiles_stay_bounded_over_changing_packed_shapes():
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    lm = tiny_lm()
    accelerate_layers(lm, True, [0], backend="aot_eager")
    policy = PolicyModel(
        lm, 7, packing=True, attn_ragged="loop", head_ops=compiled_ops("aot_eager")
    )
    graphs = []
    for step in range(8):  # different row lengths, sequence counts and scored counts
        mb = pack_micro_batch(seqs(3 + step % 3, seed=10 + step), 0, 16)
        policy(mb, 1.0, True)[0].sum().backward()
        graphs.append(counters["stats"]["unique_graphs"])
    # each input that changes (row length, sequence count, longest sequence) costs one
    # recompile, after which it is dynamic; then no step compiles anything new (the CPU "loop"
    # attention also breaks each layer's graph at its host list of offsets)
    assert graphs[-4] == graphs[-1], graphs
    assert graphs[-1] <= 20, graphs


def test_rl_trainer_packed_equals_padded_over_two_steps():
    results = []
    for packing in (False, True):
        cfg = TrainerConfig.model_validate({
            "optim": {"lr": 1e-3}, "batch": {"micro_batch_tokens": 60, "chunk_tokens": 8,
                                             "packing": packing, "pack_multiple": 16},
            "rl": {"ppo_epochs": 2, "num_minibatches": 2},
        })  # fmt: skip
        trainer = RLTrainer(cfg, model=tiny_lm())
        losses = [trainer.train_step(trajectories(6, seed=s)).loss for s in range(2)]
        results.append((losses, {k: v.clone() for k, v in trainer.model.state_dict().items()}))
    (l0, p0), (l1, p1) = results
    assert l1 == pytest.approx(l0, rel=1e-5, abs=1e-6)
    init = tiny_lm().state_dict()
    for k in p0:  # 4 AdamW updates of lr 1e-3 moved every weight by up to 4e-3; summation
        # order differs between layouts, and Adam magnifies it where a gradient is near zero
        assert (p0[k] - init[k]).abs().max() > 1e-3
        torch.testing.assert_close(p1[k], p0[k], atol=3e-4, rtol=1e-3)


def test_sft_packed_equals_padded():
    from tritonforge.jobs.sft_data import TokenizedExample
    from tritonforge.training.sft import SFTTrainer

    examples = [
        TokenizedExample(t.token_ids, t.loss_mask) for t in trajectories(5, seed=7)
    ]  # fmt: skip
    losses = []
    for packing in (False, True):
        cfg = SFTRunConfig.model_validate(
            {"batch": {"micro_batch_tokens": 50, "packing": packing}, "optim": {"lr": 1e-3}}
        )
        trainer = SFTTrainer(cfg, model=tiny_lm())
        losses.append([trainer.train_step(examples)["loss"] for _ in range(2)])
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)


def test_dummy_micro_batches_stand_for_no_sequence():
    # regression: a packed dummy once carried seq_index [0], so under FSDP a rank with fewer
    # micro-batches overwrote sequence 0's stored old log-probs with the dummy's zeros
    for packing in (True, False):
        cfg = TrainerConfig.model_validate({"batch": {"packing": packing}})
        core = RLTrainer(cfg, model=tiny_lm()).core
        mb = core._dummy()
        assert mb.seq_index == [] and mb.num_tokens == 0 and mb.mask.sum() == 0
        assert (mb.packed is not None) == packing
        logp, _ = core.forward(mb)
        assert logp.shape == mb.shape


def test_cuda_only_attention_configured_on_cpu_falls_back_and_trains():
    cfg = TrainerConfig.model_validate(
        {
            "batch": {
                "attention": "varlen",
                "attention_uniform": "sdpa_cudnn",
                "micro_batch_tokens": 60,
            }
        }
    )
    m = RLTrainer(cfg, model=tiny_lm()).train_step(trajectories(4))
    assert math.isfinite(m.loss) and m.grad_norm > 0


def test_checkpoint_indices_spread_evenly():
    assert checkpoint_indices(28, None) == list(range(28))
    assert checkpoint_indices(28, 40) == list(range(28))
    assert checkpoint_indices(28, 0) == []
    assert checkpoint_indices(8, 4) == [0, 2, 4, 6]
    assert checkpoint_indices(36, 18) == list(range(0, 36, 2))


def test_fused_adamw_only_when_asked_on_cpu():
    from tritonforge.config.train import OptimConfig

    lm = tiny_lm()
    assert not build_optimizer(lm, OptimConfig()).defaults.get("fused")
    assert build_optimizer(lm, OptimConfig(fused=True)).defaults["fused"] is True


def test_metric_sums_accumulate_on_device_with_one_reduce():
    sums = MetricSums()
    sums.add({"loss": torch.tensor(1.0), "clip_fraction": torch.tensor(0.5),
              "ratio_max": torch.tensor(1.2)}, 10)  # fmt: skip
    sums.add({"loss": torch.tensor(2.0), "clip_fraction": torch.tensor(0.0),
              "ratio_max": torch.tensor(1.1)}, 30)  # fmt: skip
    sums.add({"loss": torch.tensor(0.5), "clip_fraction": torch.tensor(1.0),
              "ratio_max": torch.tensor(9.0)}, 0)  # a dummy: no tokens, no maximum  # fmt: skip
    out = sums.reduce(DistContext(), ["clip_fraction", "loss", "ratio_max"])
    assert out == pytest.approx({"loss": 3.5, "clip_fraction": 0.125, "ratio_max": 1.2})
    assert MetricSums().reduce(DistContext(), ["a_max"]) == {"a_max": -math.inf}


def test_eager_and_compiled_chunk_ops_are_both_selectable():
    assert compiled_ops("aot_eager") is compiled_ops("aot_eager")
    assert compiled_ops("aot_eager") is not EAGER


@pytest.mark.slow
def test_compiled_head_with_inductor():
    """The lm-head chunk functions through inductor's CPU code generation (about a minute)."""
    from tritonforge.training.logprobs import chunked_token_logprobs

    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, 40, 16, generator=g).requires_grad_(True)
    weight = torch.randn(300, 16, generator=g).bfloat16().requires_grad_(True)
    targets = torch.randint(0, 300, (2, 40), generator=g)
    targets[0, :5] = -100
    outs = []
    for ops in (EAGER, compiled_ops("inductor")):
        logp, ent = chunked_token_logprobs(hidden, weight, targets, 16, 0.7, True, ops)
        (logp.sum() + 0.3 * ent.sum()).backward()
        outs.append((logp.detach(), ent.detach(), hidden.grad.clone(), weight.grad.clone()))
        hidden.grad = weight.grad = None
    for a, b in zip(*outs):
        torch.testing.assert_close(a.float(), b.float(), atol=2e-2, rtol=2e-2)
