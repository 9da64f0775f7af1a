"""RL losses against hand-computed numbers: clipping, aggregation, GSPO, TIS, KL, entropy, masks."""

from __future__ import annotations

import math

import pytest
import torch

from tritonforge.training.advantages import (
    broadcast_turn_values,
    trajectory_token_advantages,
    turn_index_from_runs,
    turn_index_from_spans,
)
from tritonforge.training.losses import (
    LOSSES,
    LossConfig,
    LossInputs,
    compute_loss,
    get_loss,
    needs_reference,
    register_loss,
)
from tritonforge.types import Trajectory, Turn

D = torch.float64


def t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=D)


def inputs(logp, old, adv, mask=None, **kw) -> tuple[LossInputs, torch.Tensor]:
    """LossInputs with a leaf `logp` (returned too, for gradients)."""
    logp = t(logp).requires_grad_(True)
    mask = t(mask) if mask is not None else torch.ones_like(logp)
    extra = {k: (t(v) if isinstance(v, list) else v) for k, v in kw.items()}
    return LossInputs(logp=logp, old_logp=t(old), advantages=t(adv), mask=mask, **extra), logp


def run(inp: LossInputs, **cfg) -> tuple[torch.Tensor, dict]:
    return compute_loss(inp, LossConfig(**cfg))


# Three tokens, ratios r = [1.5, 0.5, 1.1] against old_logp = [-1, -2, -0.5].
OLD = [[-1.0, -2.0, -0.5]]
LOGP = [[-1.0 + math.log(1.5), -2.0 + math.log(0.5), -0.5 + math.log(1.1)]]


def test_registry_has_the_losses_and_rejects_unknown_names():
    assert {"grpo", "dr_grpo", "gspo", "grpo_tis", "gspo_tis"} <= set(LOSSES)
    assert get_loss("grpo") is LOSSES["grpo"]
    with pytest.raises(ValueError, match="unknown loss"):
        get_loss("nope")
    with pytest.raises(ValueError):
        LossConfig(type="nope")
    with pytest.raises(ValueError, match="already registered"):
        register_loss("grpo")(LOSSES["grpo"])


def test_grpo_clip_high_clip_low_and_unclipped():
    # bounds [1 - 0.2, 1 + 0.28] = [0.8, 1.28]
    # tok0: r=1.5, A=+1 -> max(-1.5, -1.28) = -1.28   (clip high binds, no gradient)
    # tok1: r=0.5, A=-1 -> max( 0.5,  0.80) =  0.80   (clip low binds, no gradient)
    # tok2: r=1.1, A=+1 -> max(-1.1, -1.10) = -1.10   (inside, d/dlogp = -A r / 3 = -1.1/3)
    # token_mean = (-1.28 + 0.8 - 1.1) / 3 = -0.52666...
    inp, logp = inputs(LOGP, OLD, [[1.0, -1.0, 1.0]])
    loss, m = run(inp)
    assert loss.item() == pytest.approx(-1.58 / 3, abs=1e-12)
    loss.backward()
    assert logp.grad.tolist()[0] == pytest.approx([0.0, 0.0, -1.1 / 3], abs=1e-12)
    assert m["clip_fraction"].item() == pytest.approx(2 / 3)
    assert m["clip_high_fraction"].item() == pytest.approx(1 / 3)
    assert m["clip_low_fraction"].item() == pytest.approx(1 / 3)
    assert m["ratio_mean"].item() == pytest.approx((1.5 + 0.5 + 1.1) / 3)
    assert m["ratio_max"].item() == pytest.approx(1.5)


def test_grpo_clip_does_not_bind_in_the_pessimistic_direction():
    # tok0: r=1.5, A=-1 -> max(1.5, 1.28) = 1.5  (unclipped, grad -A r / 3 = 0.5)
    # tok1: r=0.5, A=+1 -> max(-0.5, -0.8) = -0.5 (unclipped, grad -0.5 / 3)
    # tok2: r=1.1, A=0  -> 0
    inp, logp = inputs(LOGP, OLD, [[-1.0, 1.0, 0.0]])
    loss, m = run(inp)
    assert loss.item() == pytest.approx((1.5 - 0.5) / 3, abs=1e-12)
    loss.backward()
    assert logp.grad.tolist()[0] == pytest.approx([0.5, -0.5 / 3, 0.0], abs=1e-12)
    assert m["clip_fraction"].item() == 0.0


def test_grpo_symmetric_clip_differs_from_clip_higher():
    # With clip_high = 0.2, tok0 gives -1.2 instead of -1.28: (-1.2 + 0.8 - 1.1)/3 = -0.5
    inp, _ = inputs(LOGP, OLD, [[1.0, -1.0, 1.0]])
    assert run(inp, clip_high=0.2)[0].item() == pytest.approx(-0.5, abs=1e-12)


# Two sequences, ratio 1 (logp == old): per-token loss = -A.
# seq0 = [-1, -2, -3] (3 tokens), seq1 = [-4] (1 token; positions 2, 3 masked)
AGG_LOGP = [[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]]
AGG_ADV = [[1.0, 2.0, 3.0], [4.0, 100.0, 100.0]]
AGG_MASK = [[1, 1, 1], [1, 0, 0]]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token_mean", -10 / 4),  # (-1-2-3-4) / 4 tokens
        ("seq_mean_token_sum", -5.0),  # (-6 + -4) / 2 sequences
        ("seq_mean_token_mean", -3.0),  # (-6/3 + -4/1) / 2
        ("constant_norm", -0.5),  # -10 / (2 sequences * 10)
    ],
)
def test_aggregation_modes(mode, expected):
    inp, _ = inputs(AGG_LOGP, AGG_LOGP, AGG_ADV, AGG_MASK)
    assert run(inp, aggregation=mode, norm_constant=10.0)[0].item() == pytest.approx(expected)


def test_dr_grpo_uses_the_constant_normaliser_whatever_the_aggregation():
    inp, logp = inputs(AGG_LOGP, AGG_LOGP, AGG_ADV, AGG_MASK)
    loss, _ = run(inp, type="dr_grpo", aggregation="token_mean", norm_constant=10.0)
    assert loss.item() == pytest.approx(-0.5)  # -10 / (2 * 10)
    loss.backward()  # d/dlogp_t = -A_t r_t / 20, no dependence on sequence length
    torch.testing.assert_close(logp.grad, t([[-0.05, -0.1, -0.15], [-0.2, 0.0, 0.0]]))


def test_global_normalisers_for_micro_batches():
    # The step has 8 tokens over 4 sequences; this micro-batch holds 4 of them over 2.
    inp, _ = inputs(AGG_LOGP, AGG_LOGP, AGG_ADV, AGG_MASK, num_tokens=8.0, num_seqs=4.0)
    assert run(inp)[0].item() == pytest.approx(-10 / 8)
    assert run(inp, aggregation="seq_mean_token_mean")[0].item() == pytest.approx(-6 / 4)
    # Two micro-batches with global counts sum to the full-batch token mean.
    a, _ = inputs([[-1.0, -1.0, -1.0]], [[-1.0, -1.0, -1.0]], [[1.0, 2.0, 3.0]], num_tokens=4.0)
    b, _ = inputs(
        [[-1.0, -1.0, -1.0]], [[-1.0, -1.0, -1.0]], [[4.0, 0, 0]], [[1, 0, 0]], num_tokens=4.0
    )
    full, _ = inputs(AGG_LOGP, AGG_LOGP, AGG_ADV, AGG_MASK)
    assert (run(a)[0] + run(b)[0]).item() == pytest.approx(run(full)[0].item())


def test_gspo_sequence_ratio_clipped_for_positive_advantage():
    # log ratios [0.3, -0.1, 0.1] -> mean 0.1 -> s = e^0.1 = 1.10517 > 1 + 4e-4
    # A = +1: every token's loss = -clip(s) = -1.0004, seq mean = -1.0004, no gradient.
    old = [[-1.0, -1.0, -1.0]]
    logp = [[-0.7, -1.1, -0.9]]
    inp, lp = inputs(logp, old, [[1.0, 1.0, 1.0]])
    loss, m = run(inp, type="gspo")
    assert loss.item() == pytest.approx(-1.0004, abs=1e-12)
    loss.backward()
    assert lp.grad.abs().max().item() == 0.0
    assert m["clip_fraction"].item() == 1.0
    assert m["ratio_mean"].item() == pytest.approx(math.exp(0.1))


def test_gspo_unclipped_gradient_is_the_sequence_ratio_gradient():
    # A = -1 and s = e^0.1 > 1: the pessimistic term is the unclipped -A s = 1.10517;
    # d/dlogp_t (s) = s / 3 for each token = 0.368390...
    old = [[-1.0, -1.0, -1.0]]
    logp = [[-0.7, -1.1, -0.9]]
    inp, lp = inputs(logp, old, [[-1.0, -1.0, -1.0]])
    loss, m = run(inp, type="gspo")
    s = math.exp(0.1)
    assert loss.item() == pytest.approx(s, abs=1e-12)
    loss.backward()
    assert lp.grad.tolist()[0] == pytest.approx([s / 3] * 3, abs=1e-12)
    assert m["clip_fraction"].item() == 0.0


def test_gspo_matches_the_pure_sequence_formula_on_ragged_batches():
    torch.manual_seed(0)
    old = torch.randn(3, 5, dtype=D) - 2
    logp0 = old + 0.05 * torch.randn(3, 5, dtype=D)
    mask = t([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 1, 1, 1, 0]])
    adv = t([[1.0] * 5, [-2.0] * 5, [0.5] * 5])
    cfg = {"type": "gspo", "gspo_clip_low": 0.02, "gspo_clip_high": 0.03}
    lp = logp0.clone().requires_grad_(True)
    loss, _ = compute_loss(LossInputs(lp, old, adv, mask), LossConfig(**cfg))
    loss.backward()
    # GSPO paper eq. (5): -mean_i min(s_i A_i, clip(s_i) A_i), s_i = exp(mean_t log ratio)
    lp2 = logp0.clone().requires_grad_(True)
    s = torch.exp(((lp2 - old) * mask).sum(-1) / mask.sum(-1))
    a = adv[:, 0]
    ref = -torch.minimum(s * a, s.clamp(1 - 0.02, 1 + 0.03) * a).mean()
    ref.backward()
    assert loss.item() == pytest.approx(ref.item(), abs=1e-12)
    torch.testing.assert_close(lp.grad, lp2.grad)


def test_grpo_tis_weight_is_capped_and_detached():
    # old - rollout = [ln 1.5, ln 3, ln 0.5] -> w = [1.5, min(3, 2) = 2, 0.5]
    # ratio 1, A = 1: loss = -(1.5 + 2 + 0.5) / 3 = -4/3; d/dlogp_t = -w_t / 3
    old = [[-1.0, -2.0, -0.5]]
    rollout = [[-1.0 - math.log(1.5), -2.0 - math.log(3.0), -0.5 - math.log(0.5)]]
    inp, lp = inputs(old, old, [[1.0, 1.0, 1.0]], rollout_logp=rollout)
    loss, m = run(inp, type="grpo_tis", tis_cap=2.0)
    assert loss.item() == pytest.approx(-4 / 3, abs=1e-12)
    loss.backward()
    assert lp.grad.tolist()[0] == pytest.approx([-0.5, -2 / 3, -0.5 / 3], abs=1e-12)
    assert m["tis_weight_mean"].item() == pytest.approx(4 / 3)
    assert m["tis_capped_fraction"].item() == pytest.approx(1 / 3)
    gap = (math.log(1.5) + math.log(3.0) + math.log(2.0)) / 3  # mean |old - rollout|
    assert m["logprob_gap"].item() == pytest.approx(gap)
    # plain grpo ignores the rollout log-probs: -1
    assert run(inp)[0].item() == pytest.approx(-1.0)


def test_tis_sequence_level_uses_the_geometric_mean():
    # mean log weight = (ln 1.5 + ln 3 + ln 0.5) / 3 = ln(2.25) / 3 -> w = 2.25^(1/3) = 1.3104
    old = [[-1.0, -2.0, -0.5]]
    rollout = [[-1.0 - math.log(1.5), -2.0 - math.log(3.0), -0.5 - math.log(0.5)]]
    inp, _ = inputs(old, old, [[1.0, 1.0, 1.0]], rollout_logp=rollout)
    loss, m = run(inp, type="grpo_tis", tis_level="sequence")
    assert loss.item() == pytest.approx(-(2.25 ** (1 / 3)), abs=1e-12)
    assert m["tis_capped_fraction"].item() == 0.0
    # gspo_tis: ratio 1 (inside clip), A = 1 -> -w as well
    assert run(inp, type="gspo_tis", tis_level="sequence")[0].item() == pytest.approx(
        -(2.25 ** (1 / 3))
    )


def test_tis_needs_rollout_logprobs():
    inp, _ = inputs(OLD, OLD, [[1.0, 1.0, 1.0]])
    with pytest.raises(ValueError, match="rollout_logp"):
        run(inp, type="grpo_tis")


@pytest.mark.parametrize(
    ("kl_type", "value", "grads"),
    [
        # k1 = logp - ref = [0.5, -1], mean -0.25; d/dlogp = 1 per token
        ("k1", -0.25, [1.0, 1.0]),
        # k3 = e^d - d - 1 with d = ref - logp = [-0.5, 1]: [0.106531, 0.718282], mean 0.412406
        # d/dlogp = 1 - e^d = [0.393469, -1.718282]
        ("k3", (math.exp(-0.5) - 0.5 + math.exp(1) - 2) / 2, [1 - math.exp(-0.5), 1 - math.e]),
        # k2 = (logp - ref)^2 / 2 = [0.125, 0.5], mean 0.3125; d/dlogp = logp - ref
        ("k2", 0.3125, [0.5, -1.0]),
    ],
)
def test_kl_penalty(kl_type, value, grads):
    # A = 0, so the loss is kl_coef * mean(kl); gradient kl_coef * dkl/dlogp / 2 tokens
    inp, lp = inputs([[-1.0, -2.0]], [[-1.0, -2.0]], [[0.0, 0.0]], ref_logp=[[-1.5, -1.0]])
    loss, m = run(inp, kl_coef=0.1, kl_type=kl_type)
    assert loss.item() == pytest.approx(0.1 * value, abs=1e-12)
    assert m["kl"].item() == pytest.approx(value, rel=1e-6)  # metrics are float32
    loss.backward()
    assert lp.grad.tolist()[0] == pytest.approx([0.1 * g / 2 for g in grads], abs=1e-12)


def test_kl_needs_reference_only_when_weighted():
    assert not needs_reference(LossConfig())
    assert needs_reference(LossConfig(kl_coef=0.01))
    inp, _ = inputs([[-1.0, -2.0]], [[-1.0, -2.0]], [[0.0, 0.0]])
    with pytest.raises(ValueError, match="ref_logp"):
        run(inp, kl_coef=0.1)
    # a reference without weight is only measured
    inp, _ = inputs([[-1.0, -2.0]], [[-1.0, -2.0]], [[0.0, 0.0]], ref_logp=[[-1.5, -1.0]])
    loss, m = run(inp, kl_type="k1")
    assert loss.item() == 0.0 and m["kl"].item() == pytest.approx(-0.25)


def test_entropy_bonus():
    # A = 0: loss = -0.01 * mean([0.5, 1.5]) = -0.01
    ent = t([[0.5, 1.5]]).requires_grad_(True)
    inp, _ = inputs([[-1.0, -2.0]], [[-1.0, -2.0]], [[0.0, 0.0]], entropy=ent)
    loss, m = run(inp, entropy_coef=0.01)
    assert loss.item() == pytest.approx(-0.01, abs=1e-12)
    assert m["entropy"].item() == pytest.approx(1.0)
    loss.backward()
    assert ent.grad.tolist()[0] == pytest.approx([-0.005, -0.005])
    with pytest.raises(ValueError, match="entropy"):
        run(inputs([[-1.0]], [[-1.0]], [[0.0]])[0], entropy_coef=0.01)


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "gspo", "grpo_tis", "gspo_tis"])
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_sum", "seq_mean_token_mean"])
def test_masked_tokens_never_affect_loss_or_gradients(loss_type, aggregation):
    torch.manual_seed(1)
    b, n = 2, 4
    old = torch.randn(b, n, dtype=D) - 1
    base = {
        "logp0": old + 0.3 * torch.randn(b, n, dtype=D),
        "old": old,
        "roll": old + 0.4 * torch.randn(b, n, dtype=D),
        "ref": old + 0.2 * torch.randn(b, n, dtype=D),
        "adv": torch.randn(b, n, dtype=D),
        "ent": torch.rand(b, n, dtype=D),
    }
    cfg = LossConfig(
        type=loss_type,
        aggregation=aggregation,
        kl_coef=0.1,
        entropy_coef=0.01,
        gspo_clip_low=0.05,
        gspo_clip_high=0.05,
    )

    def grads(pad: bool):
        garbage = [math.nan, math.inf, -math.inf, 1e4, math.nan, math.nan]  # one per base entry
        x = {
            k: (torch.cat([v, torch.full((b, 3), fill, dtype=D)], 1) if pad else v)
            for (k, v), fill in zip(base.items(), garbage, strict=True)
        }
        mask = (
            torch.cat([torch.ones(b, n, dtype=D), torch.zeros(b, 3, dtype=D)], 1)
            if pad
            else torch.ones(b, n, dtype=D)
        )
        lp, ent = x["logp0"].clone().requires_grad_(True), x["ent"].clone().requires_grad_(True)
        inp = LossInputs(
            lp, x["old"], x["adv"], mask, rollout_logp=x["roll"], ref_logp=x["ref"], entropy=ent
        )
        loss, metrics = compute_loss(inp, cfg)
        loss.backward()
        return loss, metrics, lp.grad, ent.grad

    loss_p, m_p, g_p, e_p = grads(pad=True)
    loss_c, m_c, g_c, _ = grads(pad=False)
    assert torch.isfinite(loss_p) and loss_p.item() == pytest.approx(loss_c.item(), abs=1e-12)
    torch.testing.assert_close(g_p[:, :n], g_c)
    assert (g_p[:, n:] == 0).all() and (e_p[:, n:] == 0).all()
    for key, value in m_c.items():
        assert m_p[key].item() == pytest.approx(value.item(), rel=1e-6), key


def test_shape_mismatch_is_rejected():
    with pytest.raises(ValueError, match="old_logp"):
        LossInputs(torch.zeros(2, 3), torch.zeros(2, 4), torch.zeros(2, 3), torch.ones(2, 3))


# ---------------------------------------------------------------------------------------------
# advantages
# ---------------------------------------------------------------------------------------------


def test_turn_index_from_spans_and_runs():
    # prompt(2) | turn0 (3) | feedback (2) | turn1 (2) | pad (1)
    mask = [0, 0, 1, 1, 1, 0, 0, 1, 1, 0]
    expected = [-1, -1, 0, 0, 0, -1, -1, 1, 1, -1]
    assert turn_index_from_spans(mask, [(2, 5), (7, 9)]).tolist() == expected
    assert turn_index_from_runs(mask).tolist() == expected
    with pytest.raises(ValueError, match="no turn span"):
        turn_index_from_spans(mask, [(2, 5)])
    with pytest.raises(ValueError, match="overlaps"):
        turn_index_from_spans(mask, [(2, 5), (4, 9)])


def test_broadcast_turn_values_single_and_batched():
    idx = torch.tensor([-1, -1, 0, 0, 0, -1, -1, 1, 1, -1])
    adv = broadcast_turn_values(idx, [0.7, -0.3])
    assert adv.tolist() == pytest.approx([0, 0, 0.7, 0.7, 0.7, 0, 0, -0.3, -0.3, 0])
    batched = broadcast_turn_values(
        torch.stack([idx, torch.full_like(idx, -1)]), torch.tensor([[1.0, 2.0], [5.0, 5.0]])
    )
    assert batched.tolist() == [[0, 0, 1, 1, 1, 0, 0, 2, 2, 0], [0] * 10]  # exact small floats
    with pytest.raises(ValueError, match="turn values"):
        broadcast_turn_values(idx, [0.7])


def test_trajectory_token_advantages_use_turn_spans():
    def turn(i: int, prompt_len: int, n: int) -> Turn:
        return Turn(
            index=i,
            prompt_len=prompt_len,
            response_ids=[9] * n,
            response_logprobs=[0.0] * n,
            response_text="",
            code=None,
        )

    # prompt [1, 2] | turn0 [9, 9] | feedback [5] | turn1 [9, 9, 9]
    traj = Trajectory(
        problem_id="p",
        prompt_ids=[1, 2],
        token_ids=[1, 2, 9, 9, 5, 9, 9, 9],
        loss_mask=[0, 0, 1, 1, 0, 1, 1, 1],
        rollout_logprobs=[0.0] * 8,
        turns=[turn(0, 2, 2), turn(1, 5, 3)],
    )
    adv = trajectory_token_advantages(traj, [1.5, -0.5])
    assert adv == pytest.approx([0, 0, 1.5, 1.5, 0, -0.5, -0.5, -0.5])
