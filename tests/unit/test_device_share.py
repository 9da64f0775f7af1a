"""The policy's work on the judge's GPU holds the judge's device gate shared (device_share)."""

from __future__ import annotations

import threading
import time

from tritonforge.config import load_config
from tritonforge.config.run import TrainRunConfig
from tritonforge.evaluation.judge.device_gate import gate
from tritonforge.training.device_share import DeviceShare, share_for


def test_a_hold_waits_for_a_timing_and_keeps_the_next_one_out() -> None:
    """A timing (exclusive) in progress makes the hold wait; a hold in progress makes a timing
    wait: the device's timed rounds never overlap generation or training."""
    device = "test-share-0"  # a gate of its own (no CUDA work: nothing to synchronize)
    share = DeviceShare(device)
    events: list[str] = []
    timing_started = threading.Event()

    def timing(pause: float) -> None:
        with gate(device).exclusive():
            events.append("timing in")
            timing_started.set()
            time.sleep(pause)
            events.append("timing out")

    t = threading.Thread(target=timing, args=(0.2,))
    t.start()
    timing_started.wait(5)
    with share.hold() as waited:
        events.append("hold")
    t.join()
    assert events == ["timing in", "timing out", "hold"]
    assert waited > 0.1 and share.waited_s >= waited and share.holds == 1

    events.clear()
    with share.hold():
        t = threading.Thread(target=timing, args=(0.0,))
        t.start()
        time.sleep(0.1)
        events.append("hold done")
    t.join()
    assert events == ["hold done", "timing in", "timing out"]


def test_no_device_is_a_no_op() -> None:
    share = DeviceShare(None)
    with share.hold() as waited:
        assert waited == 0.0
    assert share.holds == 0


def _cfg(*overrides: str) -> TrainRunConfig:
    return load_config(TrainRunConfig, None, list(overrides))


def test_share_for_follows_where_the_judge_and_the_policy_run() -> None:
    gpu = ["eval.settings.device='cuda'", "engine.device='cuda'"]
    assert share_for(_cfg(*gpu), "cuda:0").device == "cuda:0"
    assert share_for(_cfg(*gpu), "cpu").device == "cuda:0"  # the engine alone shares it
    assert share_for(_cfg("eval.settings.device='cuda'"), "cuda:0").device == "cuda:0"
    judged_on_cpu = _cfg("eval.settings.device='cpu'", "engine.device='cuda'")
    assert share_for(judged_on_cpu, "cuda:0").device is None
    assert share_for(_cfg(), "cpu").device is None  # a CPU run
    other = [*gpu, "eval.settings.device_index=1"]  # the judge on another GPU
    assert share_for(_cfg(*other), "cuda:0").device is None
    served = [*gpu, "eval.type='http'"]  # the judge in another process: no gate to share
    assert share_for(_cfg(*served), "cuda:0").device is None
