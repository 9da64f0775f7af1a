"""Checkpoints: resume equivalence (SFT and RL), pruning, RNG; the learning-rate schedule."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from helpers.train import tiny_lm, trajectories
from tritonforge.config.train import OptimConfig, SFTRunConfig, TrainerConfig
from tritonforge.jobs.sft_data import TokenizedExample
from tritonforge.training.checkpoint import (
    get_rng_state,
    latest_checkpoint,
    list_checkpoints,
    set_rng_state,
)
from tritonforge.training.optim import lr_factor
from tritonforge.training.rl import RLTrainer
from tritonforge.training.sft import SFTTrainer

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def examples(n: int = 6, seed: int = 0) -> list[TokenizedExample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        t = int(torch.randint(8, 24, (1,), generator=g))
        ids = torch.randint(0, 512, (t,), generator=g).tolist()
        out.append(TokenizedExample(ids, [0] * 4 + [1] * (t - 4)))
    return out


def sft_cfg(tmp_path) -> SFTRunConfig:
    return SFTRunConfig.model_validate({
        "run_dir": str(tmp_path),
        "optim": {"lr": 1e-2, "schedule": "cosine", "warmup_steps": 1, "total_steps": 4},
        "batch": {"micro_batch_tokens": 32, "chunk_tokens": 8},
        "sft": {"batch_size": 2, "shuffle": True, "seed": 5, "epochs": 3},
        "checkpoint": {"keep_last": 1},
        "logging": {"progress": False},
    })  # fmt: skip


def state(m: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 1e-6) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=atol, rtol=0)


def test_sft_resume_equals_uninterrupted_run(tmp_path):
    data = examples(6)  # 3 steps per epoch: 4 steps cross an epoch boundary (new shuffle)
    full = SFTTrainer(sft_cfg(tmp_path / "a"), model=tiny_lm(seed=0))
    full.fit(data, max_steps=4)

    first = SFTTrainer(sft_cfg(tmp_path / "b"), model=tiny_lm(seed=0))
    first.fit(data, max_steps=2)
    path = first.save_checkpoint()
    assert path.name == "step_00000002"
    torch.manual_seed(1234)  # disturb the global RNG: the checkpoint restores it
    resumed = SFTTrainer(sft_cfg(tmp_path / "b"), model=tiny_lm(seed=99))  # other init
    assert resumed.resume()
    assert (resumed.step, resumed.epoch, resumed.offset) == (2, 0, 4)
    resumed.fit(data, max_steps=4)
    assert (resumed.step, resumed.epoch) == (full.step, full.epoch)
    assert_same(state(full.core.lm), state(resumed.core.lm))
    assert resumed.core.scheduler.last_epoch == full.core.scheduler.last_epoch == 4
    changed = state(tiny_lm(seed=0))
    assert any(not torch.equal(changed[k], v) for k, v in state(full.core.lm).items())


def test_rl_resume_equals_uninterrupted_run(tmp_path):
    def cfg():
        return TrainerConfig.model_validate({
            "optim": {"lr": 1e-2},
            "batch": {"micro_batch_tokens": 40, "chunk_tokens": 8},
            "rl": {"num_minibatches": 2, "ppo_epochs": 2},
        })  # fmt: skip

    full = RLTrainer(cfg(), model=tiny_lm(seed=0), run_dir=tmp_path / "a")
    for step in range(4):
        full.train_step(trajectories(5, seed=step))

    first = RLTrainer(cfg(), model=tiny_lm(seed=0), run_dir=tmp_path / "b")
    for step in range(2):
        first.train_step(trajectories(5, seed=step))
    first.checkpoint(extra={"rollout_position": 17})
    resumed = RLTrainer(cfg(), model=tiny_lm(seed=3), run_dir=tmp_path / "b")
    extra = resumed.resume()
    assert extra["rollout_position"] == 17 and resumed.policy_version == 2
    for step in range(2, 4):
        resumed.train_step(trajectories(5, seed=step))
    assert resumed.policy_version == full.policy_version == 4
    assert_same(state(full.model), state(resumed.model))


def test_keep_last_and_latest(tmp_path):
    trainer = SFTTrainer(sft_cfg(tmp_path), model=tiny_lm())
    data = examples(4)
    for _ in range(3):
        trainer.fit(data, max_steps=trainer.step + 1)
        trainer.save_checkpoint()
    found = list_checkpoints(tmp_path / "checkpoints")
    assert [s for s, _ in found] == [3]  # keep_last = 1
    assert latest_checkpoint(tmp_path / "checkpoints") == found[0][1]
    assert latest_checkpoint(tmp_path / "nothing") is None


def test_rng_states_round_trip():
    saved = get_rng_state()
    a = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    set_rng_state(saved)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == a


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        # warmup 2: (s+1)/2; then over total - warmup = 4 steps, floor 0.1
        ("constant", [0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
        ("linear", [0.5, 1.0, 1.0, 0.775, 0.55, 0.325, 0.1]),
        ("cosine", [0.5, 1.0, 1.0, 0.1 + 0.9 * (0.5 + 0.5 * 2**-0.5), 0.55,
                    0.1 + 0.9 * (0.5 - 0.5 * 2**-0.5), 0.1]),
    ],
)  # fmt: skip
def test_lr_schedule_by_hand(schedule, expected):
    cfg = OptimConfig(schedule=schedule, warmup_steps=2, total_steps=6, min_lr_ratio=0.1)
    assert [lr_factor(s, cfg) for s in range(7)] == pytest.approx(expected)


def test_decay_needs_total_steps():
    with pytest.raises(ValueError, match="total_steps"):
        OptimConfig(schedule="cosine")
