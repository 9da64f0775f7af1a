"""The split of an RL step's wall time (training.accounting), NVML sampling windows
(training.device_monitor) and the per-step speedup (training.episodes.speedup_geomean)."""

from __future__ import annotations

import asyncio
import inspect
import time

import pytest

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator, LocalBackend
from tritonforge.problems import load_suite
from tritonforge.training.accounting import (
    LoopAccounting,
    TimedBackend,
    Timeline,
    aggregate,
    judge_spans,
)
from tritonforge.training.device_monitor import DeviceMonitor, Sample, open_monitor
from tritonforge.training.device_share import DeviceShare
from tritonforge.training.episodes import speedup_geomean
from tritonforge.types import Status, Trajectory, Turn, Verdict


def test_timeline_unions_overlapping_spans_within_a_window() -> None:
    tl = Timeline()
    tl.add("generate", 10.0, 12.0)
    tl.add("generate", 11.0, 13.0)  # overlaps the first: 10..13 once
    tl.add("judge", 12.5, 20.0)
    assert tl.busy(("generate",), 0.0, 100.0) == pytest.approx(3.0)
    assert tl.busy(("generate",), 11.5, 12.5) == pytest.approx(1.0)  # clipped to the window
    assert tl.busy(("generate", "judge"), 10.0, 20.0) == pytest.approx(10.0)
    tl.count("verdicts", 1.0, 12.0)
    tl.count("verdicts", 1.0, 15.0)
    assert tl.total("verdicts", 10.0, 12.0) == 1.0 and tl.total("verdicts", 12.0, 20.0) == 1.0


def test_an_open_span_counts_until_now() -> None:
    tl = Timeline()
    t0 = time.monotonic()
    tl.begin("judge")
    time.sleep(0.05)
    busy = tl.busy(("judge",), t0, time.monotonic())
    assert 0.04 < busy < 1.0


def test_judge_spans_put_the_queue_first_and_timing_last() -> None:
    v = Verdict(
        status=Status.CORRECT,
        wall_seconds=8.0,
        phase_seconds={"admission_wait": 1.0, "gate_wait": 0.5, "timing": 2.0, "recheck": 0.5},
    )
    spans = {k: (a, b) for k, a, b in judge_spans(v, 100.0, 110.0)}  # 2 s outside the evaluator
    assert spans["judge_queue"] == (100.0, 103.5)
    assert spans["judge_timing"] == (107.5, 110.0)
    assert spans["judge_correctness"] == (103.5, 107.5)
    cached = v.model_copy(update={"cached": True})
    assert judge_spans(cached, 100.0, 100.1) == []


def _accounting(tl: Timeline) -> LoopAccounting:
    return LoopAccounting(tl, DeviceShare(None), "cpu", None, "no GPU in this run (device cpu)")


def test_step_fields_split_a_window_and_start_the_next() -> None:
    tl = Timeline()
    acc = _accounting(tl)
    acc.start()
    now = time.monotonic()
    tl.add("generate", now - 0.0, now + 0.0)  # empty: ignored
    time.sleep(0.2)
    t = time.monotonic()
    tl.add("generate", t - 0.15, t - 0.05)
    tl.add("train", t - 0.1, t)  # overlaps generation by 0.05 s
    tl.add("judge", t - 0.19, t - 0.17)
    tl.add("judge_correctness", t - 0.19, t - 0.17)
    tl.count("gen_tokens", 50.0, t - 0.05)
    row = acc.step_fields()
    assert row["wall_s"] >= 0.2
    for part in ("generate_s", "judge_s", "train_s", "sync_s", "busy_s"):
        assert 0.0 <= row[part] <= row["wall_s"] + 1e-9
    assert row["generate_s"] == pytest.approx(0.1, abs=1e-6)
    assert row["busy_s"] == pytest.approx(0.17, abs=1e-6)
    assert row["idle_s"] == pytest.approx(row["wall_s"] - row["busy_s"])
    assert row["judge_unsplit_s"] == pytest.approx(0.0, abs=1e-9)
    assert row["wall_over_slowest"] == pytest.approx(row["wall_s"] / row["train_s"])
    assert row["gen_tokens"] == 50.0 and row["gen_tokens_per_s"] == pytest.approx(500.0)
    assert "gpu_busy" not in row and row["host_rss_gib"] > 0
    nxt = acc.step_fields()  # the next window starts where this one ended: nothing in it
    assert nxt["busy_s"] == 0.0 and nxt["gen_tokens"] == 0.0 and nxt["wall_s"] < row["wall_s"]


def test_aggregate_leaves_out_the_first_step_and_weights_busy_by_wall() -> None:
    rows = [
        {"wall_s": 10.0, "wall_over_slowest": 3.0, "gpu_busy": 0.1},
        {"wall_s": 1.0, "wall_over_slowest": 1.1, "gpu_busy": 0.9},
        {"wall_s": 3.0, "wall_over_slowest": 1.5, "gpu_busy": 0.5},
        {"wall_s": 2.0, "wall_over_slowest": 1.2},  # no NVML sample in this window
    ]
    for r in rows:
        r.update({f"{k}_s": 0.0 for k in ("generate", "judge", "train", "sync", "idle")})
        r.update({f"judge_{k}_s": 0.0 for k in ("queue", "correctness", "timing")})
    agg = aggregate(rows)
    assert agg["steps_counted"] == 3 and agg["first_step_counted"] == 1
    assert agg["step_over_slowest_stage"] == 1.2
    assert agg["gpu_busy_fraction"] == pytest.approx((0.9 * 1 + 0.5 * 3) / 4)
    assert agg["mean_s"]["wall"] == pytest.approx(2.0)
    assert aggregate(rows[:1])["steps_counted"] == 1  # one step: that one
    assert aggregate([])["steps_counted"] == 0


def test_timed_backend_records_a_real_verdict() -> None:
    tl = Timeline()
    backend = TimedBackend(LocalBackend(Evaluator(EvalSettings(device="cpu"))), tl)
    problem = next(p for p in load_suite("builtin", size="cpu") if p.name == "relu")
    t0 = time.monotonic()

    async def judge() -> Verdict:
        try:
            return await backend.evaluate(problem, "class ModelNew(:")
        finally:
            await backend.aclose()

    v = asyncio.run(judge())
    t1 = time.monotonic()
    assert v.status is Status.SYNTAX_ERROR
    assert tl.total("verdicts", t0, t1) == 1.0
    assert 0 < tl.busy(("judge",), t0, t1) <= t1 - t0
    parts = tl.busy(("judge_queue", "judge_correctness", "judge_timing"), t0, t1)
    assert parts == pytest.approx(tl.busy(("judge",), t0, t1))


def test_timed_engine_keeps_the_engine_protocols_statically(tmp_path) -> None:
    """Python 3.12 looks a runtime protocol's attributes up statically (no __getattr__): the
    wrapper of the in-process engine must itself have `load_state_dict`, or the loop would push
    weights through disk; an HTTP engine's wrapper must not have it."""
    from tritonforge.config.engine import SamplingParams
    from tritonforge.rollout.engines.base import Engine
    from tritonforge.rollout.engines.hf import HFEngine
    from tritonforge.rollout.engines.vllm import VLLMEngine
    from tritonforge.rollout.tiny_model import ensure_tiny_model
    from tritonforge.training.accounting import timed_engine
    from tritonforge.training.pieces import StateDictEngine

    tl = Timeline()
    hf = timed_engine(HFEngine.from_pretrained(ensure_tiny_model(tmp_path / "m")), tl)
    assert inspect.getattr_static(hf, "load_state_dict") and isinstance(hf, StateDictEngine)
    assert isinstance(hf, Engine) and hf.policy_version == 0
    http = timed_engine(VLLMEngine("http://127.0.0.1:9"), tl)
    with pytest.raises(AttributeError):
        inspect.getattr_static(http, "load_state_dict")
    assert isinstance(http, Engine) and not isinstance(http, StateDictEngine)
    t0 = time.monotonic()
    params = SamplingParams(max_new_tokens=4, ignore_eos=True)
    gens = asyncio.run(hf.generate([[5, 6, 7], [8, 9]], params))
    assert [len(g.token_ids) for g in gens] == [4, 4]
    assert tl.total("gen_tokens", t0, time.monotonic()) == 8.0
    asyncio.run(hf.aclose())
    asyncio.run(http.aclose())


def test_device_monitor_window_means_busy_and_peaks_memory() -> None:
    mon = DeviceMonitor(read=None)
    for t, busy, used in [(1.0, 0.2, 1 << 30), (2.0, 0.8, 3 << 30), (3.0, 1.0, 2 << 30)]:
        mon.add(Sample(t, busy, used))
    w = mon.window(1.5, 3.0)
    assert w["gpu_busy"] == pytest.approx(0.9) and w["device_mem_peak_gib"] == pytest.approx(3.0)
    assert mon.window(3.5, 4.0) == {"gpu_busy": None, "device_mem_peak_gib": None}


def test_device_monitor_samples_in_its_thread_and_stops() -> None:
    mon = DeviceMonitor(lambda: (50.0, 1 << 30), period_s=0.01).start()
    t0 = time.monotonic()
    time.sleep(0.1)
    mon.stop()
    w = mon.window(t0, time.monotonic())
    assert w["gpu_busy"] == pytest.approx(0.5) and w["device_mem_peak_gib"] == pytest.approx(1.0)


def test_no_monitor_says_why() -> None:
    monitor, why = open_monitor("cpu")
    assert monitor is None and "no GPU" in why
    monitor, why = open_monitor("cuda:0")  # this machine has no NVIDIA driver or no CUDA torch
    if monitor is None:
        assert why.startswith("NVML unavailable")
    else:  # pragma: no cover - a GPU machine
        monitor.stop()


def _turn(status: Status, speedup: float | None) -> Turn:
    v = Verdict(status=status, speedup=speedup)
    return Turn(index=0, prompt_len=1, response_ids=[], response_logprobs=[], response_text="",
                code=None, verdict=v)  # fmt: skip


def test_speedup_geomean_takes_each_episodes_best_correct_timed_turn() -> None:
    def traj(*turns: Turn) -> Trajectory:
        return Trajectory(problem_id="p", prompt_ids=[1], token_ids=[1], loss_mask=[0],
                          rollout_logprobs=[0.0], turns=list(turns))  # fmt: skip

    trajs = [
        traj(_turn(Status.CORRECT, 2.0), _turn(Status.CORRECT, 8.0)),  # best: 8
        traj(_turn(Status.NUMERICAL_MISMATCH, 50.0), _turn(Status.CORRECT, 0.5)),  # 0.5
        traj(_turn(Status.CORRECT, None)),  # untimed: left out
    ]
    assert speedup_geomean(trajs) == pytest.approx(2.0)
    assert speedup_geomean(trajs[2:]) is None
