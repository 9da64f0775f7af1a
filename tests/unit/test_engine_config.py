"""Engine configs: one class per engine selected by `type`, abilities on the class, no engine names.

Covers: every registered class (its `type` is its registry name, its engine class resolves and has
`from_config`); a TOML section without `type` is the hf engine; a key of another engine refused
naming the engine types that have it; an unknown type with a "did you mean"; a file or override
that changes `type` on top of a base (a command's tuned defaults) dropping the old engine's keys;
the balancer's endpoints built as its backend with the keys they share; a Ray worker's share of
servers (one server kind -> balanced over several); the planner's checks driven by abilities
(device kinds, pause modes, URLs, in-memory weight sync); `--list-keys` showing every engine's keys.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonforge.config import ConfigError, config_keys, load_config, with_overrides
from tritonforge.config.engine import (
    ENGINES,
    BalancedEngineConfig,
    HFEngineConfig,
    SGLangEngineConfig,
    VLLMEngineConfig,
)
from tritonforge.config.registry import resolve_ref
from tritonforge.config.run import TrainRunConfig
from tritonforge.plan import PlanError
from tritonforge.plan.checks import check_engine
from tritonforge.plan.runs import resolve_train
from tritonforge.scale.actors import worker_engine_config


def test_every_engine_class_is_registered_under_its_type() -> None:
    assert ENGINES.names() == ["balanced", "hf", "sglang", "vllm"]
    for name in ENGINES.names():
        cls = ENGINES[name]
        assert cls().type == name and cls.model_fields["type"].default == name
        assert callable(resolve_ref(cls.implementation).from_config), name
    assert HFEngineConfig.abilities.state_dict_weights and not HFEngineConfig.abilities.servers
    assert not any(ENGINES[n].abilities.state_dict_weights for n in ("vllm", "sglang", "balanced"))


def test_a_section_without_type_is_the_hf_engine(tmp_path: Path) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text('[engine]\nmodel_path = "m"\ndevice = "cpu"\n')
    cfg = load_config(TrainRunConfig, toml)
    assert isinstance(cfg.engine, HFEngineConfig) and cfg.engine.model_path == "m"
    served = load_config(TrainRunConfig, None, ['engine.type="vllm"', 'engine.url="http://h:1"'])
    assert isinstance(served.engine, VLLMEngineConfig) and served.engine.url == "http://h:1"
    again = TrainRunConfig.model_validate_json(served.model_dump_json())
    assert again.engine == served.engine  # the saved config reads back as the same engine


def test_a_key_of_another_engine_names_the_engines_that_have_it() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(TrainRunConfig, None, ['engine.type="vllm"', 'engine.device="cuda"'])
    assert (
        "unknown key engine.device (engine.type 'vllm' has no such key; "
        "engine.type 'hf' has it)" in str(info.value)
    )
    with pytest.raises(ConfigError, match=r"engine.type 'vllm' or 'balanced' has it"):
        load_config(TrainRunConfig, None, ['engine.type="sglang"', "engine.served_model_name=1"])
    with pytest.raises(ConfigError, match=r"unknown key engine.devic; did you mean 'device'\?$"):
        load_config(TrainRunConfig, None, ['engine.devic="cpu"'])
    with pytest.raises(ConfigError) as info:
        load_config(TrainRunConfig, None, ['engine.type="vlm"'])
    assert (
        "engine.type: Input should be 'hf', 'vllm', 'sglang' or 'balanced'; did you mean 'vllm'?"
        in str(info.value)
    )


def test_a_layer_changing_type_drops_the_earlier_layers_keys_of_the_old_engine(
    tmp_path: Path,
) -> None:
    base = TrainRunConfig()
    base.engine.max_batch_size = 128  # a command's tuned default (as the demo's)
    cfg = load_config(TrainRunConfig, None, ['engine.type="sglang"'], base=base)
    assert isinstance(cfg.engine, SGLangEngineConfig)
    assert cfg.engine.model_path == base.engine.model_path  # a key both engines have is kept
    toml = tmp_path / "served.toml"
    toml.write_text('[engine]\ntype = "vllm"\nurl = "http://h:2"\n')
    served = load_config(TrainRunConfig, toml, base=base)
    assert isinstance(served.engine, VLLMEngineConfig) and served.engine.url == "http://h:2"
    back = with_overrides(served, ['engine.type="hf"', 'engine.device="cpu"'])
    assert isinstance(back.engine, HFEngineConfig) and back.engine.max_batch_size == 16
    gpu = tmp_path / "gpu.toml"  # a file for the hf engine, switched by an override
    gpu.write_text('[engine]\ntype = "hf"\ndevice = "cuda"\npause_mode = "keep"\n')
    switched = load_config(TrainRunConfig, gpu, ['engine.type="vllm"'])
    assert isinstance(switched.engine, VLLMEngineConfig) and switched.engine.pause_mode == "keep"
    with pytest.raises(ConfigError, match=r"unknown key engine\.device"):  # given after the switch
        load_config(TrainRunConfig, gpu, ['engine.type="vllm"', 'engine.device="cpu"'])


def test_balanced_endpoints_are_its_backend_with_the_keys_they_share() -> None:
    bal = BalancedEngineConfig(
        urls=["http://a", "http://b"], served_model_name="m", pause_mode="abort", max_attempts=2
    )
    one = bal.endpoint("http://b")
    assert isinstance(one, VLLMEngineConfig)
    assert (one.url, one.urls, one.served_model_name, one.pause_mode, one.max_attempts) == (
        "http://b",
        [],
        "m",
        "abort",
        2,
    )
    sg = BalancedEngineConfig(backend="sglang", urls=["http://a"]).endpoint("http://a")
    assert isinstance(sg, SGLangEngineConfig) and sg.url == "http://a"
    with pytest.raises(ValueError, match="unknown balanced backend 'hf'; known: sglang, vllm"):
        BalancedEngineConfig(backend="hf")


def test_a_workers_share_of_sglang_servers_is_a_balanced_sglang_engine() -> None:
    e = SGLangEngineConfig(urls=["http://a", "http://b", "http://c"], max_concurrency=3)
    w0 = worker_engine_config(e, 0, 2, 1, None)
    assert isinstance(w0, BalancedEngineConfig) and w0.backend == "sglang"
    assert (w0.urls, w0.max_concurrency) == (["http://a", "http://c"], 3)
    bal = worker_engine_config(BalancedEngineConfig(urls=["http://x", "http://y"]), 1, 2, 1, None)
    assert isinstance(bal, BalancedEngineConfig) and bal.urls == ["http://y"]


def test_the_planner_reads_abilities_not_engine_names() -> None:
    with pytest.raises(PlanError, match=r"engine.device: the hf engine runs on cpu or cuda, not"):
        check_engine("engine", HFEngineConfig(device="mps"))
    with pytest.raises(PlanError, match=r"engine\.url: 'nohost' is not an http"):
        check_engine("engine", VLLMEngineConfig(url="nohost"))
    with pytest.raises(PlanError, match=r"engine\.urls: a balanced engine needs at least one URL"):
        check_engine("engine", BalancedEngineConfig())
    assert check_engine("engine", VLLMEngineConfig(pause_mode="abort")).path == "runs/tiny-model"
    cfg = TrainRunConfig.model_validate({"weight_sync": "state_dict"})
    resolve_train(cfg)  # the hf engine takes weights in memory
    cfg.engine = SGLangEngineConfig()
    with pytest.raises(PlanError, match=r"in memory \(hf\), not sglang; use disk or auto"):
        resolve_train(cfg)


def test_list_keys_shows_every_engines_keys() -> None:
    keys = {k.key: k for k in config_keys(TrainRunConfig)}
    assert keys["engine.type"].type == "'hf' | 'vllm' | 'sglang' | 'balanced'"
    assert keys["engine.device"].description == "torch device."  # the default engine's own
    assert keys["engine.url"].description.startswith("[type vllm|sglang] ")
    assert keys["engine.backend"].description.startswith("[type balanced] ")
    served = TrainRunConfig.model_validate({"engine": {"type": "vllm", "url": "http://h:3"}})
    shown = {k.key: k for k in config_keys(TrainRunConfig, served)}
    assert (
        shown["engine.url"].default == "http://h:3"
        and "[type hf]" in shown["engine.device"].description
    )
