"""The garbage collector kept out of training steps (training/gc_control.py): off inside a
step, young garbage freed after it, survivors of the first step frozen, a full collection every
N steps, the collector's state restored; and the trainers' steps run under it."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from helpers.train import tiny_lm, trajectories
from tritonforge.config.train import TrainerConfig
from tritonforge.training.gc_control import StepGC
from tritonforge.training.rl import RLTrainer


@pytest.fixture
def collector() -> Iterator[None]:
    """Whatever a test freezes is given back, and the collector left enabled."""
    yield
    gc.unfreeze()
    gc.enable()


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_no_collection_inside_a_step_and_young_garbage_freed_after(collector) -> None:
    ctl = StepGC(full_every=3)
    seen = []
    with ctl.step():
        seen.append(gc.isenabled())
        with ctl.step():  # nested: the same step
            seen.append(gc.isenabled())
        cycle = weakref.ref(Node())
        assert cycle() is not None  # not collected while the step runs
    assert seen == [False, False] and gc.isenabled() and ctl.steps == 1
    assert cycle() is None  # freed right after the step
    assert gc.get_freeze_count() > 0  # survivors of the first step are frozen


def test_a_full_collection_every_n_steps_frees_old_cycles(collector) -> None:
    ctl = StepGC(full_every=3)
    with ctl.step():  # step 1: survivors frozen
        pass
    old = Node()
    gc.collect(1)  # into the oldest generation: young collections no longer see it
    old_ref = weakref.ref(old)
    del old
    with ctl.step():  # step 2: young collection only
        pass
    assert old_ref() is not None and ctl.full_collections == 0
    with ctl.step():  # step 3: full
        pass
    assert old_ref() is None and ctl.full_collections == 1


def test_the_collector_comes_back_when_the_after_step_collection_fails(collector, monkeypatch):
    ctl = StepGC(full_every=2)

    def interrupted(*generation):
        raise KeyboardInterrupt

    monkeypatch.setattr(gc, "collect", interrupted)
    with pytest.raises(KeyboardInterrupt), ctl.step():
        pass
    assert gc.isenabled()


def test_zero_leaves_the_collector_alone(collector) -> None:
    ctl = StepGC(full_every=0)
    with ctl.step():
        assert gc.isenabled()
    gc.disable()
    with StepGC(full_every=5).step():
        pass
    assert not gc.isenabled()  # a caller's disabled collector stays disabled


def test_the_rl_trainer_steps_without_collections(collector) -> None:
    cfg = TrainerConfig.model_validate({"batch": {"micro_batch_tokens": 60, "chunk_tokens": 8}})
    trainer = RLTrainer(cfg, model=tiny_lm())
    counts = []
    embed = trainer.core.lm.get_input_embeddings()
    embed.register_forward_pre_hook(lambda *a: counts.append(gc.isenabled()))
    trainer.train_step(trajectories(4))
    assert counts and not any(counts) and gc.isenabled()
    assert trainer.core.gc.steps == 1
