"""benchmarks/train_step.py --tiny on CPU: every phase runs and the JSON has what the GPU run
reports (device facts, attention checks, each variant, agreement, verdict, the ladder shape)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_tiny_benchmark_runs_every_phase(tmp_path: Path) -> None:
    out = tmp_path / "train_step.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(REPO / "benchmarks" / "train_step.py"), "--tiny", "--profile",
           "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["device_facts"]["device"] == "cpu" and "6 * N * tokens" in report["flop_formula"]
    backends = report["attention"]["backends"]
    assert backends["loop"]["ok"] and backends["sdpa"]["ok"]
    assert report["attention"]["chosen"] == {"uniform": "sdpa", "ragged": "loop"}
    tiny = report["shapes"]["tiny"]
    expected = {"naive_micro1", "fast", "fast_keep_logits", "fast_half_micro",
                "fast_compiled_head", "fast_round1", "packed_eager", "fast_pure_bf16",
                "trainer_before"}  # fmt: skip
    assert set(tiny["results"]) == expected
    for name, res in tiny["results"].items():
        assert res["status"] == "ok", (name, res)
        assert len(res["step_s_all"]) == 2 and res["tokens_per_s"] > 0
        assert name == "naive_micro1" or res["host_prep_ms"] > 0
    assert tiny["agreement"]["pass"] is True and tiny["agreement"]["grads_missing"] == []
    assert tiny["agreement"]["variant"] == "fast"
    kept = tiny["agreement_fast_keep_logits"]  # its own check (the CPU runs the eager head)
    assert kept["variant"] == "fast_keep_logits" and kept["pass"] is True
    assert tiny["results"]["fast_keep_logits"]["settings"]["head"] == "triton_keep"
    best = tiny["verdict"]["best_config"]  # what a user puts in the trainer config
    assert best["model"]["dtype"] == "bf16" and "micro_batch_tokens" in best["batch"]
    assert tiny["results"]["fast"]["profile"]["status"] == "ok"
    assert (tmp_path / "profile_tiny.txt").read_text().strip()
    assert (tmp_path / "profile_tiny_fast_keep_logits.txt").read_text().strip()
    assert tiny["verdict"]["best"] in expected
    assert report["shapes"]["tiny2"]["results"]["fast_try0"]["status"] == "ok"


def test_pairs_repeat_naive_and_best_with_only_the_chosen_variants(tmp_path: Path) -> None:
    """--variants narrows the first shape's variants; --pairs runs rounds of naive + best after
    them and reports each round's ratio and their spread; a wrong variant name is refused."""
    out = tmp_path / "pairs.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    script = str(REPO / "benchmarks" / "train_step.py")
    cmd = [
        sys.executable,
        script,
        "--tiny",
        "--variants",
        "fast",
        "--pairs",
        "2",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    tiny = json.loads(out.read_text())["shapes"]["tiny"]
    assert set(tiny["results"]) == {"naive_micro1", "fast"}
    pairs = tiny["pairs"]
    assert pairs["variant"] == tiny["verdict"]["best"] == "fast" and pairs["n"] == 2
    for r in pairs["rounds"]:
        assert r["naive_s"] > 0 and r["trainer_s"] > 0
        assert abs(r["ratio"] - r["trainer_s"] / r["naive_s"]) < 2e-3
    assert pairs["ratio_min"] <= pairs["ratio_median"] <= pairs["ratio_max"]
    assert pairs["met"] == sum(r["ratio"] <= 0.4 for r in pairs["rounds"])
    bad = subprocess.run([sys.executable, script, "--tiny", "--variants", "fastest"], env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "unknown ['fastest']" in bad.stderr


def test_failed_fast_path_is_retried_with_default_attention(monkeypatch) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import train_step as ts

    def fake_trainer(args, shape, config, device, v, deadline, ctx):
        if v["uniform"] != "auto":
            raise RuntimeError("kernel refused these strides")
        return {"status": "ok", "step_s": 1.0, "mfu_with_attention": 0.5}

    monkeypatch.setattr(ts, "run_trainer", fake_trainer)
    monkeypatch.setattr(ts, "run_naive", lambda *a: {"status": "ok", "step_s": 4.0})
    monkeypatch.setattr(ts, "agreement", lambda *a: {"status": "ok", "pass": True})
    args = ts.parse(["--tiny"])
    report = {"device_facts": {}, "shapes": {},
              "attention": {"chosen": {"uniform": "sdpa_cudnn", "ragged": "varlen"}}}  # fmt: skip
    essential, _ = ts.first_shape_variants(args, report["attention"]["chosen"])
    ts.run_variants(args, "tiny", "cpu", report, essential, True)
    res = report["shapes"]["tiny"]
    assert res["results"]["fast"]["status"] == "error"
    assert "strides" in res["results"]["fast"]["error"]
    assert res["results"]["fast_default_attention"]["status"] == "ok"
    assert res["agreement"]["pass"] and report["attention"]["chosen"]["uniform"] == "auto"
    assert res["verdict"]["best"] == "fast_default_attention"
    assert res["verdict"]["speed_target_met"] and res["verdict"]["mfu_target_met"]


def test_pairs_rerun_what_the_verdict_names_with_its_own_settings(monkeypatch) -> None:
    """run_pairs repeats the variant the verdict names (also the retry with default attention,
    which is not in the variant list) with the settings it ran with; a failed round is kept as
    its statuses; without a trainer result there are no pairs."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import train_step as ts

    seen: list[dict] = []
    steps = iter([0.9, 1.1, 0.8])

    def fake_trainer(args, shape, config, device, v, deadline, ctx):
        seen.append(v)
        step = next(steps)
        return {"status": "ok", "step_s": step} if step < 1.0 else {"status": "oom"}

    monkeypatch.setattr(ts, "run_trainer", fake_trainer)
    monkeypatch.setattr(ts, "run_naive", lambda *a: {"status": "ok", "step_s": 2.0})
    args = ts.parse(["--tiny", "--pairs", "3"])
    ran = {"uniform": "auto", "ragged": "auto", "head": "triton", "agree": True, "name": "x"}
    report = {"device_facts": {}, "shapes": {"tiny": {
        "results": {"fast": {"status": "error"},
                    "fast_default_attention": {"status": "ok", "step_s": 1.0, "settings": ran}},
        "verdict": {"best": "fast_default_attention"}}}}  # fmt: skip
    ts.run_pairs(args, "tiny", "cpu", report)
    pairs = report["shapes"]["tiny"]["pairs"]
    assert pairs["variant"] == "fast_default_attention" and len(seen) == 3
    assert all(v["uniform"] == "auto" and v["head"] == "triton" and "agree" not in v for v in seen)
    assert pairs["rounds"][1] == {"naive": "ok", "trainer": "oom"}
    assert [r.get("ratio") for r in pairs["rounds"]] == [0.45, None, 0.4]
    assert pairs["n"] == 2 and pairs["met"] == 1 and pairs["ratio_min"] == 0.4
    report["shapes"]["tiny"]["verdict"] = {"status": "no_trainer_result"}
    ts.run_pairs(args, "tiny", "cpu", report)
    assert report["shapes"]["tiny"]["pairs"] == {"status": "no_trainer_result"}


def test_other_shapes_keep_the_head_that_worked_on_the_first() -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import train_step as ts

    args = ts.parse([])
    attn = {"uniform": "sdpa", "ragged": "loop"}
    triton = ts.other_shape_ladder(args, "1.7b", attn, True)
    compiled = ts.other_shape_ladder(args, "1.7b", attn, True, "compiled")
    assert triton[0]["head"] == "triton" and triton[0]["where"] == "optimizer"
    assert compiled[0]["head"] == "compiled" and compiled[0]["chunk"] == args.chunk
    assert ts.other_shape_ladder(args, "4b", attn, True)[0]["ckpt"] == 18
    kept = ts.other_shape_ladder(args, "1.7b", attn, True, "triton_keep")
    assert kept[0]["head"] == "triton_keep" and kept[0]["chunk"] == args.big_chunk


@pytest.mark.parametrize(
    "results,head",
    [({"fast": {"status": "ok", "step_s": 1.0},
       "fast_keep_logits": {"status": "ok", "step_s": 0.9}}, "triton_keep"),
     ({"fast": {"status": "ok", "step_s": 1.0},
       "fast_keep_logits": {"status": "ok", "step_s": 1.1}}, "triton"),
     ({"fast": {"status": "error"}, "fast_keep_logits": {"status": "oom"}}, "triton"),
     ({"fast": {"status": "error"}, "fast_keep_logits": {"status": "error"}}, "compiled")],
)  # fmt: skip
def test_other_shapes_keep_logits_only_where_that_was_faster(results, head) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import train_step as ts

    assert ts.ladder_head(results) == head


def test_trace_analysis_groups_kernel_time_and_finds_gaps() -> None:
    """benchmarks/train_trace.py's analysis on a hand-made Chrome trace: busy time is the
    union of kernel intervals, a gap of >= 20 us is attributed to the host op around its
    launch, and kernel time is summed by group and by name."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import train_trace as tt

    def kernel(name: str, ts: float, dur: float, corr: int) -> dict:
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur,
                "args": {"correlation": corr}}  # fmt: skip

    events = [
        kernel("nvjet_sm90_tst_256x128", 0.0, 100.0, 1),
        kernel("triton_poi_fused_mul_silu_0", 50.0, 100.0, 2),  # overlaps: busy 0..150
        kernel("cudnn_generated_fort_native_sdpa_sm90_flash_bprop", 200.0, 300.0, 3),  # gap 50
        kernel("void at::native::vectorized_elementwise_kernel<4, add>", 510.0, 40.0, 4),  # gap 10
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 190.0, "dur": 2.0,
         "tid": 7, "args": {"correlation": 3}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::_cudnn_attention_backward", "ts": 180.0,
         "dur": 20.0, "tid": 7},
    ]  # fmt: skip
    report = tt.analyse({"traceEvents": events}, wall_s=0.001)
    assert report["kernels"] == 4
    assert report["device_span_ms"] == 0.55 and report["device_busy_ms"] == 0.49
    assert report["gaps_over_20us"] == 1 and report["gap_ms_total"] == 0.05
    assert "aten::_cudnn_attention_backward" in report["gaps_by_launch_stack"][0]["where"]
    assert report["kernel_ms_by_group"] == {
        "attention": 0.3, "matmul": 0.1, "inductor": 0.1, "other": 0.04
    }  # fmt: skip
    top = report["top_kernels"]
    assert [r["group"] for r in top] == ["attention", "matmul", "inductor", "other"]
    assert top[0]["n"] == 1 and top[0]["ms"] == 0.3


def test_floor_benchmark_times_attention_and_projections_on_cpu(tmp_path: Path) -> None:
    """benchmarks/train_floor.py --tiny: every attention case this device offers and the
    separate/fused projections are timed (or their refusal recorded); bad sizes are refused."""
    out = tmp_path / "floor.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    script = str(REPO / "benchmarks" / "train_floor.py")
    proc = subprocess.run([sys.executable, script, "--tiny", "--reps", "2", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["shape"] == "tiny"
    attn = report["attention"]
    assert {"sdpa_auto_hf", "sdpa_auto_bhnd", "sdpa_auto_repeated_kv_hf", "sdpa_math_hf"} <= set(
        attn
    )
    assert all(r["status"] == "ok" and r["fwd_ms"] > 0 and r["bwd_ms"] > 0 for r in attn.values())
    proj = report["projections"]
    for name in ("qkv", "gate_up"):
        assert proj[f"{name}_separate"]["ms"] > 0 and proj[f"{name}_fused"]["ms"] > 0
        saved = proj[f"{name}_separate"]["ms"] - proj[f"{name}_fused"]["ms"]
        assert abs(proj[f"{name}_fused_saves_ms_per_layer"] - saved) < 2e-3
    bad = subprocess.run([sys.executable, script, "--tiny", "--seq", "1", "--out", str(out)],
                         env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "--seq >= 2" in bad.stderr
