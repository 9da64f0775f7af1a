"""Presets (config/eval.py PRESETS): the registry, precedence, and what each rule changes.

Covers: each registered preset builds valid settings with the documented values; unknown names
are errors; preset < TOML file < --set < flags for the evaluation commands and serve-eval;
`preset_overrides` names the rules changed after a preset; a server request's preset keeps the
server's isolation and seeds; the comparison with and without the output-scaled atol
(hand-checked numbers), presets never set a defense; `require_custom_kernel` in hybrid mode; the `tritonforge_original`
reward; docs/presets.md names every preset. Does not cover: judging with a preset end to end
(tests/eval/test_presets_eval.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from tritonforge.commands._eval_args import add_eval_args, settings_from_args
from tritonforge.config import ConfigError
from tritonforge.config.eval import (
    CONVENTION_FIELDS,
    DEFENSE_FIELDS,
    PRESETS,
    EvalSettings,
    Preset,
    load_eval_settings,
    preset_for_server,
)
from tritonforge.evaluation.judge.checks import run_static
from tritonforge.evaluation.judge.compare import compare
from tritonforge.rollout.rewards import compute_reward, conventional_reward
from tritonforge.types import Status, Verdict

DOCS = Path(__file__).resolve().parents[2] / "docs" / "presets.md"


def test_registry_values() -> None:
    assert set(PRESETS) >= {"strict", "kernelbench", "tritonforge"}
    strict = EvalSettings.from_preset("strict")
    assert strict == EvalSettings()
    kb = EvalSettings.from_preset("kernelbench")
    assert (kb.mode, kb.correctness_trials, kb.perf_trials) == ("hybrid", 5, 100)
    assert kb.tolerance("float32") == kb.tolerance("float16") == 1e-2
    assert (kb.max_plausible_speedup, kb.implausible_speedup) == (10.0, "flag")
    tf = EvalSettings.from_preset("tritonforge")
    assert tf.require_custom_kernel and tf.compile_baseline
    assert conventional_reward("tritonforge") == "tritonforge_original" and tf.mode == "hybrid"
    assert conventional_reward("kernelbench") == conventional_reward("strict") == "tritonforge"
    for name in PRESETS:
        assert EvalSettings.from_preset(name).preset_overrides() == []


def test_presets_change_conventions_never_a_defense() -> None:
    """Every preset has the defaults' defenses; a preset that sets one is refused."""
    plain = EvalSettings()
    assert plain.atol_scale == "magnitude" and "heavy" in plain.distributions
    for name, preset in PRESETS.items():
        assert set(preset.values) <= set(CONVENTION_FIELDS), name
        s = EvalSettings.from_preset(name)
        for key in DEFENSE_FIELDS:
            assert getattr(s, key) == getattr(plain, key), (name, key)
    with pytest.raises(ValueError, match="conventions only"):
        Preset("weak", "nowhere", {"mode": "hybrid", "distributions": ["native"]})
    weakened = EvalSettings.from_preset("kernelbench", atol_scale="none")
    assert weakened.preset_overrides() == ["atol_scale"]  # named on every verdict


def test_unknown_preset_is_an_error() -> None:
    with pytest.raises(ValueError):
        EvalSettings.from_preset("nope")
    with pytest.raises(ValueError):
        EvalSettings(preset="nope")


def test_overrides_are_named() -> None:
    s = EvalSettings.from_preset("kernelbench", correctness_trials=2)
    assert s.preset == "kernelbench" and s.preset_overrides() == ["correctness_trials"]
    s.mode = "strict"
    assert s.preset_overrides() == ["mode", "correctness_trials"]


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_eval_args(p)
    return p.parse_args(argv)


def test_precedence_preset_file_set_flag(tmp_path) -> None:
    toml = tmp_path / "eval.toml"
    toml.write_text("correctness_trials = 3\nperf_trials = 7\n")
    s = settings_from_args(
        _args(["--preset", "kernelbench", "--eval-config", str(toml), "--set", "perf_trials=9"])
    )
    assert s.preset == "kernelbench" and s.mode == "hybrid"  # from the preset
    assert s.correctness_trials == 3  # the file over the preset
    assert s.perf_trials == 9  # --set over the file
    s = settings_from_args(_args(["--preset", "kernelbench", "--mode", "strict"]))
    assert s.mode == "strict" and s.preset_overrides() == ["mode"]  # the flag last


def test_preset_named_in_a_file_or_set(tmp_path) -> None:
    toml = tmp_path / "eval.toml"
    toml.write_text('preset = "tritonforge"\ncorrectness_trials = 2\n')
    s = load_eval_settings(str(toml))
    assert s.preset == "tritonforge" and s.require_custom_kernel and s.correctness_trials == 2
    s = load_eval_settings(None, ["preset=kernelbench"])
    assert s.mode == "hybrid" and s.tolerance("float32") == 1e-2
    with pytest.raises(ConfigError):
        load_eval_settings(None, ["preset=nope"])


def test_serve_eval_preset_flag(tmp_path) -> None:
    from tritonforge.commands.serve_eval import config_from_args

    ns = argparse.Namespace(
        config=None, set=["eval.correctness_trials=2"], preset="kernelbench", host=None,
        port=None, device=None, workers=None, token=None, queue_size=None, gpus=None,
    )  # fmt: skip
    cfg = config_from_args(ns)
    assert cfg.eval.preset == "kernelbench" and cfg.eval.mode == "hybrid"
    assert cfg.eval.correctness_trials == 2


def test_request_preset_keeps_server_isolation() -> None:
    server = EvalSettings(sandbox="rlimits", secret_seed=7, device="cpu")
    server.budgets.compile_s = 11.0
    s = preset_for_server("tritonforge", server)
    assert s.preset == "tritonforge" and s.require_custom_kernel
    assert (s.sandbox, s.secret_seed, s.device, s.budgets.compile_s) == ("rlimits", 7, "cpu", 11.0)


def test_atol_scale_hand_checked() -> None:
    """Expected values of rms 10: |diff| 0.005 passes 1e-4 * 10 + ... only when scaled."""
    expected = torch.full((4,), 10.0)
    got = expected + torch.tensor([0.0015, 0.0, 0.0, 0.0])
    tol = {"float32": 1e-4}.get
    # scaled: atol_eff = 1e-4 * 10 = 1e-3; bound 1e-3 + 1e-4 * 10 = 2e-3 >= 1.5e-3
    assert compare(expected, got, tol)[0] is Status.CORRECT
    # plain allclose: 1e-4 + 1e-4 * 10 = 1.1e-3 < 1.5e-3
    status, mm, why = compare(expected, got, tol, atol_scale="none")
    assert status is Status.NUMERICAL_MISMATCH and mm.mismatched == 1, why


def test_require_custom_kernel_in_hybrid() -> None:
    src = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.relu()\n"
    assert run_static(src, "hybrid").status is None
    r = run_static(src, "hybrid", require_kernel=True)
    assert (r.status, r.rule) == (Status.REWARD_HACK, "no_custom_kernel")
    assert "hybrid mode" in r.message


def test_tritonforge_original_reward() -> None:
    def v(status: Status, **kw) -> Verdict:
        return Verdict(status=status, **kw)

    r = "tritonforge_original"
    assert compute_reward(v(Status.CORRECT, speedup=3.0, speedup_vs_compile=1.5), r) == 0.8
    assert compute_reward(v(Status.CORRECT, speedup_vs_compile=9.0), r) == 2.3
    assert compute_reward(v(Status.CORRECT), r) == 0.3  # not timed (CPU)
    assert compute_reward(v(Status.NUMERICAL_MISMATCH, compiled=True), r) == 0.1
    assert compute_reward(v(Status.RUNTIME_ERROR, compiled=True), r) == 0.1
    assert compute_reward(v(Status.COMPILE_ERROR), r) == 0.0
    assert compute_reward(v(Status.REWARD_HACK, compiled=True), r) == 0.0


def test_docs_table_names_every_preset() -> None:
    text = DOCS.read_text()
    header = next(line for line in text.splitlines() if line.startswith("| Rule |"))
    for name in PRESETS:
        assert f"`{name}`" in header, name
