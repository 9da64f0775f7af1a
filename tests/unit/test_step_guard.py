"""The step guard: a trust region on the correct answers of the batch."""

from __future__ import annotations

import pytest
import torch

from helpers.train import tiny_lm, trajectories
from tritonforge.config.train import TrainerConfig
from tritonforge.training.batching import TrainSequence, prepare_sequences
from tritonforge.training.core import frozen_logprobs
from tritonforge.training.rl import RLTrainer
from tritonforge.training.step_guard import max_logprob_drop, protected_tokens, select_guard_set
from tritonforge.types import Status, Verdict

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def seq(ids, index=0) -> TrainSequence:
    return TrainSequence(ids, [0] + [1] * (len(ids) - 1), [0.0] * len(ids), index=index)


def judged(traj, *statuses: Status):
    turns = [
        t.model_copy(update={"verdict": Verdict(status=s)}) for t, s in zip(traj.turns, statuses)
    ]
    return traj.model_copy(update={"turns": turns})


def test_protected_tokens_are_the_model_tokens_of_correct_turns() -> None:
    t = judged(trajectories(1)[0], Status.NUMERICAL_MISMATCH, Status.CORRECT)
    keep = protected_tokens(t)
    second = t.turns[1]
    span = range(second.prompt_len, second.prompt_len + len(second.response_ids))
    assert [i for i, k in enumerate(keep) if k] == list(span)
    assert not any(protected_tokens(trajectories(1)[0]))  # unjudged turns protect nothing


def test_guard_set_keeps_distinct_sequences_with_a_protected_token() -> None:
    a, dup, bad, late = seq([1, 2, 3], 0), seq([1, 2, 3], 1), seq([1, 4, 5], 2), seq([1, 6, 7], 3)
    protect = {0: [0, 1, 1], 1: [0, 1, 1], 2: [0, 0, 0], 3: [0, 0, 1]}
    assert [s.index for s in select_guard_set([a, dup, bad, late], protect)] == [0, 3]
    assert select_guard_set([a], {}) == []  # not a trajectory: nothing known to protect


def test_drop_sums_only_protected_tokens_hand_computed() -> None:
    s = seq([1, 2, 3, 4], 0)  # positions 0..2 score tokens 1..3
    protect = {0: [0, 1, 0, 1]}  # tokens 1 and 3 -> positions 0 and 2
    before = {0: torch.tensor([-1.0, -1.0, -1.0])}
    after = {0: torch.tensor([-1.5, -3.0, -1.25])}
    assert max_logprob_drop(before, after, [s], protect) == pytest.approx(0.75)
    assert max_logprob_drop(before, before, [s], protect) == 0.0


def good_and_bad():
    """Three samples with advantage 0 (an all-correct group) and three failed ones (advantage
    -1) that repeat their first turns: pushing the failures down drags the good ones with them."""
    good = [
        judged(t, Status.CORRECT, Status.CORRECT).model_copy(
            update={"advantages": [0.0] * len(t.token_ids)}
        )
        for t in trajectories(3)
    ]
    bad = [
        judged(t, Status.SYNTAX_ERROR, Status.SYNTAX_ERROR).model_copy(
            update={"advantages": [-1.0 * m for m in t.loss_mask], "problem_id": "bad"}
        )
        for t in good
    ]
    return good + bad


def _worst_drop(trainer: RLTrainer, trajs) -> tuple[float, float]:
    """(drop of the worst non-negative sample, gain of the best positive one) over one step."""
    seqs, _ = prepare_sequences(trajs, trainer.cfg.batch)
    protect = {i: protected_tokens(t) for i, t in enumerate(trajs)}
    check = select_guard_set(seqs, protect)
    before = frozen_logprobs(trainer.core, trainer.core.policy, check, 1.0)
    m = trainer.train_step(trajs)
    after = frozen_logprobs(trainer.core, trainer.core.policy, check, 1.0)
    return max_logprob_drop(before, after, check, protect), m.loss_metrics.get("guard_scale", 1.0)


def test_a_large_step_is_scaled_back_until_no_good_sample_loses_more_than_the_budget() -> None:
    def cfg(guard: float) -> TrainerConfig:
        return TrainerConfig.model_validate(
            {"optim": {"lr": 3e-2}, "rl": {"max_logprob_drop": guard, "guard_halvings": 4}}
        )

    trajs = good_and_bad()
    free, _ = _worst_drop(RLTrainer(cfg(0.0), model=tiny_lm()), trajs)
    guarded_trainer = RLTrainer(cfg(0.5), model=tiny_lm())
    start = {k: v.clone() for k, v in guarded_trainer.model.state_dict().items()}
    guarded, scale = _worst_drop(guarded_trainer, trajs)
    assert free > 2.0  # the unguarded step breaks some non-negative sample badly
    assert guarded <= 0.5 + 1e-4 and scale < 1.0
    moved = any(not torch.equal(v, guarded_trainer.model.state_dict()[k]) for k, v in start.items())
    assert moved == (scale > 0)  # a step undone entirely leaves the weights as they were
    assert guarded_trainer.policy_version == 1


def test_guard_off_by_default_and_metrics_reported_when_on() -> None:
    assert TrainerConfig().rl.max_logprob_drop == 0.0
    trainer = RLTrainer(
        TrainerConfig.model_validate({"optim": {"lr": 1e-4}, "rl": {"max_logprob_drop": 5.0}}),
        model=tiny_lm(),
    )
    m = trainer.train_step(good_and_bad())
    assert m.loss_metrics["guard_scale"] == 1.0 and m.loss_metrics["guard_checks"] == 1
    assert 0 <= m.loss_metrics["guard_drop"] <= 5.0


def test_anchors_cannot_drift_more_than_the_budget_over_several_steps() -> None:
    """Anchors (e.g. the SFT answers) are compared with their log-probs at the first step, so a
    batch that only pushes their tokens down cannot lower them step after step."""
    trajs = good_and_bad()
    good, bad = trajs[:3], trajs[3:]
    anchors = [
        TrainSequence(t.token_ids, t.loss_mask, index=k) for k, t in enumerate(good)
    ]  # not in the batch: only the guard holds them
    cfg = TrainerConfig.model_validate(
        {"optim": {"lr": 3e-3}, "rl": {"max_logprob_drop": 0.3, "guard_halvings": 6}}
    )
    trainer = RLTrainer(cfg, model=tiny_lm())
    trainer.anchors = anchors
    protect = {a.index: list(a.loss_mask) for a in anchors}
    start = frozen_logprobs(trainer.core, trainer.core.policy, anchors, 1.0)
    for _ in range(4):
        trainer.train_step(bad)
    now = frozen_logprobs(trainer.core, trainer.core.policy, anchors, 1.0)
    assert max_logprob_drop(start, now, anchors, protect) <= 0.3 + 1e-4
    free = RLTrainer(
        cfg.model_copy(update={"rl": cfg.rl.model_copy(update={"max_logprob_drop": 0})}),
        model=tiny_lm(),
    )
    for _ in range(4):
        free.train_step(bad)
    later = frozen_logprobs(free.core, free.core.policy, anchors, 1.0)
    assert max_logprob_drop(start, later, anchors, protect) > 1.0
