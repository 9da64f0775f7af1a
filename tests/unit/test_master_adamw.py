"""MasterAdamW: the update of AdamW on fp32 masters, fp32 gradient sums over micro-batches,
clipping, fp32 state through state dicts and trainer checkpoints, and the trainer in that mode
against fp32 parameters under bf16 autocast."""

from __future__ import annotations

import copy

import pytest
import torch

from helpers.train import tiny_lm, trajectories
from tritonforge.config.train import TrainerConfig
from tritonforge.training.master_adamw import MasterAdamW
from tritonforge.training.rl import RLTrainer

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def pair(seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    """An fp32 model holding bf16-representable values and its bf16 copy."""
    torch.manual_seed(seed)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Linear(8, 4))
    for p in ref.parameters():
        p.data = p.data.bfloat16().float()
    return ref, copy.deepcopy(ref).bfloat16()


def groups(model: torch.nn.Module) -> list[dict]:
    ps = list(model.parameters())
    return [{"params": [p for p in ps if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}]  # fmt: skip


@pytest.mark.parametrize("fused", [False, True])
def test_masters_follow_adamw_on_fp32_parameters(fused):
    ref, half = pair()
    opt_ref = torch.optim.AdamW(groups(ref), lr=1e-2, betas=(0.9, 0.95), eps=1e-6)
    opt = MasterAdamW(groups(half), lr=1e-2, betas=(0.9, 0.95), eps=1e-6, fused=fused)
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        grads = [torch.randn(p.shape, generator=g).bfloat16() for p in ref.parameters()]
        for p, gr in zip(ref.parameters(), grads):
            p.grad = gr.float()
        for p, gr in zip(half.parameters(), grads):
            p.grad = gr.clone()
        opt_ref.step()
        opt.step()
        opt_ref.zero_grad()
        opt.zero_grad()
    for p_ref, p in zip(ref.parameters(), half.parameters()):
        master = opt.state[p]["master"]
        assert master.dtype == torch.float32 and p.dtype == torch.bfloat16
        torch.testing.assert_close(master, p_ref, atol=1e-7, rtol=1e-6)
        assert torch.equal(p, master.bfloat16())  # parameters: the masters rounded
        assert (p_ref - p_ref.detach().bfloat16().float()).abs().max() > 0  # not bf16 values


def test_gradients_of_micro_batches_are_summed_in_fp32():
    _, half = pair()
    opt = MasterAdamW(half.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(2)
    parts = [[torch.randn(p.shape, generator=g).bfloat16() for p in half.parameters()]
             for _ in range(3)]  # fmt: skip
    for part in parts:
        for p, gr in zip(half.parameters(), part):
            p.grad = gr.clone()
        opt.accumulate_grads()
        assert all(p.grad is None for p in half.parameters())
    for i, p in enumerate(half.parameters()):
        exact = sum(part[i].float() for part in parts)
        assert torch.equal(opt._sums[p], exact)
        bf16_sum = parts[0][i] + parts[1][i] + parts[2][i]
        assert not torch.equal(bf16_sum.float(), exact)  # what bf16 accumulation would give


def test_clipping_measures_and_scales_the_fp32_sums():
    ref, half = pair()
    opt = MasterAdamW(half.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(3)
    for p_ref, p in zip(ref.parameters(), half.parameters()):
        p.grad = (torch.randn(p.shape, generator=g) * 3).bfloat16()
        p_ref.grad = p.grad.float()
    expect = torch.nn.utils.clip_grad_norm_(list(ref.parameters()), 0.5)
    norm = opt.clip_grad_norm_(0.5)
    torch.testing.assert_close(norm, expect)
    for p_ref, p in zip(ref.parameters(), half.parameters()):
        torch.testing.assert_close(opt._sums[p], p_ref.grad)


def test_state_dict_round_trip_keeps_fp32_state():
    _, half = pair()
    opt = MasterAdamW(groups(half), lr=1e-2)
    for p in half.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    sd = copy.deepcopy(opt.state_dict())
    fresh = MasterAdamW(groups(half), lr=1e-2)
    fresh.load_state_dict(sd)
    for p in half.parameters():
        for key in ("master", "exp_avg", "exp_avg_sq"):
            assert fresh.state[p][key].dtype == torch.float32
            assert torch.equal(fresh.state[p][key], opt.state[p][key])


def cfg(where: str, lr: float = 1e-3, master: bool = True) -> TrainerConfig:
    return TrainerConfig.model_validate({
        "model": {"dtype": "bf16", "master_weights": where, "master_fp32": master},
        "optim": {"lr": lr, "weight_decay": 0.01},
        "batch": {"micro_batch_tokens": 40, "chunk_tokens": 8},
    })  # fmt: skip


def test_trainer_resumes_masters_exactly(tmp_path):
    """Checkpoints (torch.distributed.checkpoint state dicts) carry the fp32 masters: a resumed
    run continues exactly as the uninterrupted one."""
    first = RLTrainer(cfg("optimizer"), model=tiny_lm(), run_dir=tmp_path)
    first.train_step(trajectories(6, seed=0))
    first.checkpoint()
    first.train_step(trajectories(6, seed=1))
    resumed = RLTrainer(cfg("optimizer"), model=tiny_lm(seed=7), run_dir=tmp_path)
    assert resumed.resume() is not None
    resumed.train_step(trajectories(6, seed=1))
    for (name, a), b in zip(first.model.named_parameters(), resumed.model.parameters()):
        assert torch.equal(a, b), name
        sa, sb = first.core.optimizer.state[a], resumed.core.optimizer.state[b]
        assert sb["master"].dtype == torch.float32 and torch.equal(sa["master"], sb["master"])


def test_masters_in_the_optimizer_train_like_fp32_parameters_under_autocast():
    """3 RL steps (several micro-batches each) at an lr whose updates are below bf16's
    resolution of the weights: fp32 parameters + bf16 autocast, bf16 parameters + fp32 masters
    in the optimizer, and pure bf16. The masters move as the fp32 parameters do; pure bf16
    parameters do not (its updates round away), which is what the masters are for."""
    finals = {}
    init = {n: p.detach().bfloat16().float() for n, p in tiny_lm().named_parameters()}
    for name, where, master in (("autocast", "params", True), ("optimizer", "optimizer", True),
                                ("pure", "params", False)):  # fmt: skip
        lm = tiny_lm()
        lm.load_state_dict(init, strict=False)  # all start from bf16-representable weights
        trainer = RLTrainer(cfg(where, lr=2e-5, master=master), model=lm)
        for s in range(3):
            trainer.train_step(trajectories(8, seed=s))
        state = trainer.core.optimizer.state
        finals[name] = {n: (state[p]["master"] if name == "optimizer" else p).detach().float()
                        for n, p in trainer.model.named_parameters()}  # fmt: skip
    stuck = 0
    for n, ref in finals["autocast"].items():
        moved = (ref - init[n]).norm()
        assert moved > 0, n
        assert (finals["optimizer"][n] - ref).norm() < 0.15 * moved, n  # measured <= 0.09
        stuck += (finals["pure"][n] - ref).norm() > 0.5 * moved
    assert stuck >= len(finals["autocast"]) // 2  # pure bf16 lost most of the updates
