"""The RL trainer on tiny Qwen3 / Qwen3-MoE models built in code: log-probs, steps, references."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from helpers.train import VOCAB, tiny_lm, trajectories
from tritonforge.config.train import TrainerConfig
from tritonforge.training import model as model_mod
from tritonforge.training.batching import collate, prepare_sequences
from tritonforge.training.logprobs import entropy_from_logits, token_logprobs_from_logits
from tritonforge.training.metrics import format_step_line
from tritonforge.training.model import PolicyModel
from tritonforge.training.rl import RLTrainer

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def config(**over) -> TrainerConfig:
    tree = {"optim": {"lr": 1e-3}, "batch": {"micro_batch_tokens": 40, "chunk_tokens": 8}}
    for key, value in over.items():
        tree.setdefault(key, {}).update(value)
    return TrainerConfig.model_validate(tree)


def params(m: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("moe", [False, True])
def test_policy_logprobs_equal_naive_full_logits(moe):
    lm = tiny_lm(moe).train()
    seqs, _ = prepare_sequences(trajectories(3, seed=1), config().batch)
    mb = collate(seqs)  # right-padded rows of different lengths
    policy = PolicyModel(lm, chunk_tokens=5)
    logp, ent = policy(mb, 0.8, compute_entropy=True)
    w = torch.randn_like(logp)
    (logp * w).sum().backward()
    g_chunked = {n: p.grad.clone() for n, p in lm.named_parameters() if p.grad is not None}
    lm.zero_grad()

    logits = lm(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False).logits
    ref = token_logprobs_from_logits(logits, mb.targets, 0.8)
    ref_ent = entropy_from_logits(logits, 0.8) * (mb.targets >= 0)
    (ref * w).sum().backward()
    scored = mb.targets >= 0
    torch.testing.assert_close(logp[scored], ref[scored], atol=1e-5, rtol=1e-5)
    assert (logp[~scored] == 0).all()
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=1e-5)
    for n, p in lm.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(g_chunked[n], p.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("moe", [False, True])
@pytest.mark.parametrize("loss", ["grpo", "gspo"])
def test_three_rl_steps_finite_and_changing(moe, loss):
    trainer = RLTrainer(config(loss={"type": loss}), model=tiny_lm(moe))
    before = params(trainer.model)
    losses = []
    for step in range(3):
        m = trainer.train_step(trajectories(6, seed=step, version=step))
        losses.append(m.loss)
        assert m.step == step + 1 and trainer.policy_version == step + 1
        assert math.isfinite(m.grad_norm) and m.grad_norm > 0
        assert m.updates == 1 and m.num_seqs == 6 and m.tokens_per_s > 0
        assert m.loss_metrics["ratio_mean"] == pytest.approx(1.0)  # on-policy: old = current
        assert 0 < m.loss_metrics["entropy"] < math.log(VOCAB) + 1e-3
        assert m.loss_metrics["logprob_gap"] > 0  # random rollout logprobs differ from the model
    assert all(math.isfinite(x) for x in losses)
    after = params(trainer.model)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(changed) == len(before)  # every tensor moved (routers and experts included)


def test_empty_batch_changes_nothing_and_staleness_is_reported():
    trainer = RLTrainer(config(), model=tiny_lm())
    before = params(trainer.model)
    m = trainer.train_step(
        [t.model_copy(update={"loss_mask": [0] * len(t.token_ids)}) for t in trajectories(3)]
    )
    assert (m.updates, m.step, trainer.policy_version, m.skipped["skipped_empty"]) == (0, 0, 0, 3)
    assert all(torch.equal(v, params(trainer.model)[k]) for k, v in before.items())
    trainer.train_step(trajectories(3))
    m = trainer.train_step(trajectories(2, version=0) + trajectories(2, version=1))
    assert (m.staleness_max, m.staleness_mean) == (1, 0.5)


def test_a_batch_without_signal_does_not_step_the_optimizer():
    """Issue 15: on a near-perfect policy most batches are all-correct groups (every advantage
    0). AdamW given a zero gradient after a real step still moves the weights by its momentum,
    so the last failure's push was applied again on every such step (about 10 times at beta1
    0.9). The trainer now takes no optimizer step for a batch whose loss has no gradient."""
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.AdamW([w], lr=0.1, weight_decay=0.0)
    w.grad = torch.tensor([1.0, -1.0, 0.5])
    opt.step()
    moved = w.detach().clone()
    w.grad = torch.zeros(3)
    opt.step()
    assert not torch.allclose(w.detach(), moved)  # the mechanism: zero gradient, still a step

    trainer = RLTrainer(config(), model=tiny_lm())
    trainer.train_step(trajectories(3))
    before = params(trainer.model)
    silent = [
        t.model_copy(update={"advantages": [0.0] * len(t.token_ids)}) for t in trajectories(3)
    ]
    steps = trainer.core.optim_steps
    m = trainer.train_step(silent)
    # measured and counted as a step (version, checkpoint cadence), but the weights, the
    # optimizer's state and its step count are untouched
    assert (trainer.policy_version, m.skipped["skipped_no_signal"]) == (2, 3)
    assert trainer.core.optim_steps == steps and m.grad_norm == 0.0
    assert all(torch.equal(v, params(trainer.model)[k]) for k, v in before.items())
    assert all(p.grad is None for p in trainer.model.parameters())
    with_kl = RLTrainer(config(loss={"kl_coef": 0.1}), model=tiny_lm())
    assert with_kl.train_step(silent).updates == 1  # a KL term is a signal of its own


def test_several_epochs_and_minibatches_use_stored_old_logprobs():
    cfg = config(rl={"ppo_epochs": 2, "num_minibatches": 2}, optim={"lr": 1e-2})
    trainer = RLTrainer(cfg, model=tiny_lm())
    m = trainer.train_step(trajectories(6))
    assert m.updates == 4 and trainer.core.optim_steps == 4
    # later updates see a moved policy: ratios leave 1 and some get clipped
    assert m.loss_metrics["ratio_max"] > 1.0
    assert m.loss_metrics["clip_fraction"] > 0


def test_reference_not_loaded_without_kl(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("a reference model was loaded")

    lm = tiny_lm()
    monkeypatch.setattr(model_mod, "load_causal_lm", boom)
    monkeypatch.setattr(model_mod, "freeze", boom)  # every reference path ends here
    trainer = RLTrainer(config(loss={"kl_coef": 0.0}), model=lm)
    assert trainer.ref is None
    assert "kl" not in trainer.train_step(trajectories(4)).loss_metrics


def test_reference_with_kl_starts_at_zero_and_grows():
    trainer = RLTrainer(config(loss={"kl_coef": 0.1}, optim={"lr": 1e-2}), model=tiny_lm())
    assert trainer.ref is not None
    assert not any(p.requires_grad for p in trainer.ref.parameters())
    kl1 = trainer.train_step(trajectories(4, seed=1)).loss_metrics["kl"]
    kl2 = trainer.train_step(trajectories(4, seed=2)).loss_metrics["kl"]
    assert kl1 == pytest.approx(0.0, abs=1e-7)  # policy == reference before the first update
    assert kl2 > 1e-6


def test_tis_needs_rollout_logprobs_and_runs_with_them():
    trainer = RLTrainer(config(loss={"type": "grpo_tis", "tis_cap": 2.0}), model=tiny_lm())
    m = trainer.train_step(trajectories(4))
    assert 0 < m.loss_metrics["tis_weight_mean"] <= 2.0
    bare = [t.model_copy(update={"rollout_logprobs": []}) for t in trajectories(4)]
    with pytest.raises(ValueError, match="rollout_logp"):
        trainer.train_step(bare)


@pytest.mark.parametrize("where", ["params", "auto"])
def test_bf16_compute_keeps_fp32_masters_and_exports_bf16(tmp_path, where):
    """fp32 masters as the parameters (autocast), or (auto, one process) bf16 parameters with
    fp32 masters and moments in the optimizer; either way the export is bf16."""
    from safetensors import safe_open

    cfg = config(model={"dtype": "bf16", "master_weights": where})
    trainer = RLTrainer(cfg, model=tiny_lm(), run_dir=tmp_path)
    m = trainer.train_step(trajectories(4))
    assert math.isfinite(m.loss)
    params = list(trainer.model.parameters())
    if where == "params":
        assert all(p.dtype == torch.float32 for p in params)
    else:
        assert all(p.dtype == torch.bfloat16 for p in params)
        state = trainer.core.optimizer.state
        assert all(state[p]["master"].dtype == torch.float32 for p in params)
        assert all(torch.equal(state[p]["master"].bfloat16(), p) for p in params)
    path = trainer.save_weights()
    assert json.loads((path / "config.json").read_text())["dtype"] == "bfloat16"
    with safe_open(path / "model.safetensors", "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}


def test_save_weights_versioned_and_loadable(tmp_path):
    from transformers import AutoModelForCausalLM

    cfg = TrainerConfig.model_validate({**config().model_dump(), "keep_weights": 2})
    trainer = RLTrainer(cfg, model=tiny_lm(), run_dir=tmp_path)
    paths = []
    for step in range(3):
        trainer.train_step(trajectories(4, seed=step))
        paths.append(trainer.save_weights())
    assert [p.name for p in paths] == ["v1", "v2", "v3"]
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["v2", "v3"]
    loaded = AutoModelForCausalLM.from_pretrained(paths[-1])
    live = trainer.state_dict()
    for k, v in loaded.state_dict().items():
        torch.testing.assert_close(v, live[k])


def test_step_line_and_flat_metrics():
    trainer = RLTrainer(config(), model=tiny_lm())
    m = trainer.train_step(trajectories(4))
    flat = m.as_dict()
    assert {"loss", "grad_norm", "lr", "clip_fraction", "entropy", "tokens_per_s"} <= set(flat)
    line = format_step_line(12, {**flat, "reward": 0.41, "pass": 0.375})
    assert line.startswith("step 12 | loss ")
    assert " | reward 0.41 | pass 0.38 | " in line and "| lr 1.0e-03" in line
    order = [line.index(k) for k in ("loss", "reward", "pass", "clip", "gnorm", "tok/s", "lr")]
    assert order == sorted(order)


def test_train_config_is_torch_free_and_loss_config_moved():
    code = (
        "import sys; import tritonforge.config.train as t; "
        "t.TrainerConfig(); assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    from tritonforge.config.train import LossConfig
    from tritonforge.training import losses

    assert losses.LossConfig is LossConfig
    with pytest.raises(ValueError, match="unknown loss"):
        LossConfig(type="nope")


def test_metrics_logger_jsonl_and_tensorboard(tmp_path):
    from tritonforge.config.train import LoggingConfig
    from tritonforge.training.metrics import MetricsLogger

    logger = MetricsLogger(tmp_path, LoggingConfig(tensorboard=True))
    line = logger.log(3, {"loss": torch.tensor(0.5), "grad_norm": 2.0, "note": "text"})
    logger.close()
    assert line == "step 3 | loss 0.5000 | gnorm 2.00"
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 3 and rows[0]["loss"] == 0.5 and "note" not in rows[0]
    pytest.importorskip("tensorboard")
    assert any((tmp_path / "tb").glob("events.out.tfevents.*"))
    quiet = MetricsLogger(tmp_path / "other", is_main=False)
    quiet.log(1, {"loss": 1.0})
    assert not (tmp_path / "other").exists()


def test_unpadded_micro_batch_drops_the_mask_with_equal_results():
    trainer = RLTrainer(config(), model=tiny_lm())
    seqs, _ = prepare_sequences(trajectories(2, seed=4), config().batch)
    one = collate(seqs[:1])
    assert one.real_tokens == one.input_ids.numel()  # no padding: mask dropped in forward
    with torch.no_grad():
        fast, _ = trainer.core.forward(one)
        lm = trainer.model
        logits = lm(input_ids=one.input_ids, attention_mask=one.attention_mask).logits
        masked = token_logprobs_from_logits(logits, one.targets)
    torch.testing.assert_close(fast, masked, atol=1e-6, rtol=1e-6)
