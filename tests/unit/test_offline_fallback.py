"""A policy named by a hub id that cannot load here is replaced by `offline_fallback` (plan.runs),
and the offline models are built on first use (training.offline_models)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonforge.config import load_config, with_overrides
from tritonforge.config.run import TrainRunConfig
from tritonforge.plan import PlanError
from tritonforge.plan.checks import hub_unavailable
from tritonforge.plan.runs import resolve_policy_fallback, resolve_train
from tritonforge.training import offline_models
from tritonforge.training.offline_models import ensure_offline_model, offline_model_dir

REPO = Path(__file__).resolve().parents[2]
HUB = "Qwen/Qwen3-0.6B"


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No network and an empty Hugging Face cache."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("tritonforge.plan.checks._in_hub_cache", lambda repo_id: False)
    monkeypatch.setattr("tritonforge.problems.kernelbench._hub_reachable", lambda: False)


def test_single_gpu_config_falls_back_to_the_06b_shape_offline(offline: None) -> None:
    cfg = load_config(TrainRunConfig, REPO / "configs" / "single-gpu.toml")
    assert cfg.engine.model_path == HUB and cfg.trainer.model.path == HUB
    new, build, note = resolve_policy_fallback(cfg)
    folder = str(offline_model_dir("qwen3-0.6b-shape"))
    assert build == "qwen3-0.6b-shape"
    assert new.engine.model_path == folder and new.trainer.model.path == folder
    assert new.trainer.model.tokenizer_path is None  # not set: not replaced
    assert "engine.model_path, trainer.model.path" in note and "offline" in note
    assert cfg.engine.model_path == HUB  # the given config is left as it was


def test_no_fallback_set_or_nothing_missing_changes_nothing(offline: None, tmp_path: Path) -> None:
    cfg = load_config(TrainRunConfig, REPO / "configs" / "single-gpu.toml")
    unset = cfg.model_copy(update={"offline_fallback": None})
    assert resolve_policy_fallback(unset) == (unset, None, None)
    local = tmp_path / "qwen"  # real weights at hand: a folder is no hub id
    local.mkdir()
    here = with_overrides(cfg, [f"engine.model_path='{local}'", f"trainer.model.path='{local}'"])
    assert resolve_policy_fallback(here) == (here, None, None)


def test_hub_unavailable_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr("tritonforge.plan.checks._in_hub_cache", lambda repo_id: False)
    monkeypatch.setattr("tritonforge.problems.kernelbench._hub_reachable", lambda: False)
    assert "cannot be reached" in hub_unavailable(HUB)
    monkeypatch.setattr("tritonforge.problems.kernelbench._hub_reachable", lambda: True)
    assert hub_unavailable(HUB) is None  # it would download
    assert hub_unavailable(str(tmp_path)) is None  # a folder


def _cpu_run(tmp_path: Path, fallback: str) -> TrainRunConfig:
    return load_config(
        TrainRunConfig,
        None,
        [
            f"run_dir='{tmp_path / 'run'}'",
            f"engine.model_path='{HUB}'",
            f"trainer.model.path='{HUB}'",
            "problems.ids=['relu']",
            "eval.settings.device='cpu'",
            f"offline_fallback='{fallback}'",
        ],
    )


def test_a_planned_fallback_is_built_by_the_run(offline: None, tmp_path: Path) -> None:
    plan = resolve_train(_cpu_run(tmp_path, "tiny"))
    folder = str(offline_model_dir("tiny"))
    assert plan.offline_model == "tiny" and "offline_fallback tiny" in plan.fallback_note
    assert plan.policy.path == folder and plan.episodes.engine_model.path == folder
    assert plan.config.trainer.model.path == folder


def test_a_model_folder_as_fallback(offline: None, tmp_path: Path) -> None:
    folder = tmp_path / "carried"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    plan = resolve_train(_cpu_run(tmp_path, str(folder)))
    assert plan.offline_model is None and plan.policy.path == str(folder)
    with pytest.raises(PlanError, match=r"offline_fallback: model .*missing does not exist"):
        resolve_train(_cpu_run(tmp_path, str(tmp_path / "missing")))


def test_the_06b_shape_builder_saves_a_loadable_tied_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The builder's code at a small shape (the 0.6B one is data: QWEN3_06B_SHAPE)."""
    small = dict(vocab_size=3000, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=16, intermediate_size=64)  # fmt: skip
    for k, v in small.items():
        monkeypatch.setitem(offline_models.QWEN3_06B_SHAPE, k, v)
    path = ensure_offline_model("qwen3-0.6b-shape", tmp_path)
    assert path == tmp_path / "qwen3-0.6b-shape"
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lm = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    assert lm.config.vocab_size == 3000 and lm.config.tie_word_embeddings
    assert (
        lm.get_output_embeddings().weight.data_ptr() == lm.get_input_embeddings().weight.data_ptr()
    )
    assert next(lm.parameters()).dtype == torch.bfloat16
    assert lm.config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    stamp = (path / "config.json").stat().st_mtime_ns
    assert ensure_offline_model("qwen3-0.6b-shape", tmp_path) == path  # built once
    assert (path / "config.json").stat().st_mtime_ns == stamp
    with pytest.raises(KeyError, match="unknown offline model"):
        ensure_offline_model("qwen3-7b", tmp_path)
