"""Resolve, then run: config/ stands alone, every command prints its resolved config and its
keys, and plans check problems, names, models, devices and run dirs without importing torch.

Covers: the import boundary of tritonforge.config (a child process), `--print-config` and
`--list-keys` on every command that takes a config, the configs/ files still loading, the train,
demo, SFT and eval plans (pending models, hub ids, run dirs), the size warning of eval-kernel on
the package's own GPU-size files, and that the driver's pieces satisfy its Protocols.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tritonforge.cli import main
from tritonforge.config import ConfigError, load_config
from tritonforge.config.demo import DemoConfig
from tritonforge.config.run import TrainRunConfig
from tritonforge.config.train import SFTRunConfig
from tritonforge.plan import PlanError
from tritonforge.plan.checks import check_model, check_run_dir
from tritonforge.plan.runs import resolve_demo, resolve_eval, resolve_sft, resolve_train

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs").glob("*.toml"))


def test_config_package_imports_nothing_else_and_no_torch() -> None:
    probe = (
        "import json, pkgutil, importlib, sys, tritonforge.config as c\n"
        "for m in pkgutil.iter_modules(c.__path__): importlib.import_module(f'{c.__name__}.{m.name}')\n"
        "print(json.dumps(sorted(k for k in sys.modules if k.startswith(('tritonforge', 'torch')))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout.splitlines()[-1])
    outside = [m for m in loaded if m != "tritonforge" and not m.startswith("tritonforge.config")]
    assert outside == [], f"config/ pulls in {outside}"
    assert "tritonforge.config.engine" in loaded and "tritonforge.config.agent" in loaded


def test_rollout_modules_reexport_the_moved_sections() -> None:
    from tritonforge.config import agent, buffer, engine, task
    from tritonforge.rollout import agent as ragent
    from tritonforge.rollout import buffer as rbuffer
    from tritonforge.rollout import tasks
    from tritonforge.rollout.engines import base

    assert ragent.AgentConfig is agent.AgentConfig and rbuffer.BufferConfig is buffer.BufferConfig
    assert base.EngineConfig is engine.EngineConfig and tasks.TaskConfig is task.TaskConfig
    assert set(TrainRunConfig.model_fields) >= {"engine", "task", "agent", "problems", "eval"}


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_still_load(path: Path) -> None:
    from tritonforge.config.rollout import RolloutConfig

    model = RolloutConfig if path.name.startswith("rollout") else TrainRunConfig
    cfg = load_config(model, path)
    assert cfg.engine.type in ("hf", "vllm", "sglang", "balanced")


COMMANDS_WITH_CONFIG = [
    (["train", "--set", "steps=3"], "steps", 3),
    (["rollout", "--set", "agent.max_turns=2"], "agent.max_turns", 2),
    (["bench-model", "--set", "samples=8"], "samples", 8),
    (["sft", "--run-dir", "runs/x"], "run_dir", "runs/x"),
    (["compare", "--set", "base.steps=2"], "base.steps", 2),
    (["demo", "--set", "train.steps=4"], "train.steps", 4),
    (["serve-eval", "--port", "9999"], "port", 9999),
    (["eval-kernel", "a.py", "b.py", "--trials", "2"], "correctness_trials", 2),
    (["eval-dir", "d", "--set", "perf_trials=7"], "perf_trials", 7),
]


@pytest.mark.parametrize(("argv", "key", "value"), COMMANDS_WITH_CONFIG)
def test_print_config_shows_the_resolved_config(argv, key, value, capsys) -> None:
    assert main([*argv, "--print-config"]) == 0
    node = json.loads(capsys.readouterr().out)
    for part in key.split("."):
        node = node[part]
    assert node == value


def test_demo_print_config_keeps_the_demo_defaults(capsys) -> None:
    assert main(["demo", "--print-config"]) == 0
    cfg = json.loads(capsys.readouterr().out)
    demo = DemoConfig()  # the demo's own defaults, not the plain SFT/train ones
    assert cfg["train"]["steps"] == demo.train.steps != TrainRunConfig().steps
    assert cfg["sft"]["sft"]["max_steps"] == demo.sft.sft.max_steps != SFTRunConfig().sft.max_steps


@pytest.mark.parametrize("command", ["train", "rollout", "sft", "demo", "eval-kernel"])
def test_list_keys(command: str, capsys) -> None:
    assert main([command, "--list-keys"]) == 0
    out = capsys.readouterr().out
    expected = {
        "train": "trainer.loss.type",
        "rollout": "buffer.group_size",
        "sft": "sft.data.builtin_problems",
        "demo": "train.steps ",
        "eval-kernel": "budgets.correctness_s",
    }[command]
    assert expected in out and "(" in out
    if command == "demo":  # the demo's own defaults, not TrainRunConfig's
        assert re.search(r"^train\.steps +=\s16\s", out, re.M)


def test_override_key_typo_names_the_section_key() -> None:
    with pytest.raises(ConfigError, match=r"unknown key trainer.los; did you mean 'loss'"):
        load_config(TrainRunConfig, None, ["trainer.los.type=grpo"])


# -- plans -------------------------------------------------------------------------------------
def _tiny_train(tmp_path: Path, **extra: object) -> TrainRunConfig:
    tree = {
        "run_dir": str(tmp_path / "run"),
        "problems": {"ids": ["relu", "sigmoid"]},
        "engine": {"model_path": "runs/tiny-model"},
        "trainer": {"model": {"path": "runs/tiny-model"}},
        **extra,
    }
    return TrainRunConfig.model_validate(tree)


def test_train_plan_resolves_without_torch_or_files(tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "from tritonforge.config.run import TrainRunConfig\n"
        "from tritonforge.plan.runs import resolve_train\n"
        f"cfg = TrainRunConfig.model_validate({{'run_dir': {str(tmp_path / 'r')!r}}})\n"
        "plan = resolve_train(cfg)\n"
        "print(len(plan.problems), plan.policy.source, 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    n, source, torch_loaded = out.stdout.split()
    assert int(n) == 43 and source == "tiny" and torch_loaded == "False"
    assert not (tmp_path / "r").exists()


def test_train_plan_holds_problems_and_evaluation_problems(tmp_path: Path) -> None:
    plan = resolve_train(
        _tiny_train(tmp_path, evaluate={"problems": {"ids": ["tanh"]}}), pending=()
    )
    assert [p.name for p in plan.problems] == ["relu", "sigmoid"]
    assert [p.name for p in plan.eval_problems] == ["tanh"]
    assert plan.run_dir == tmp_path / "run" and plan.policy.source == "tiny" and not plan.ray


def test_trainer_scores_at_the_sampling_temperature(tmp_path: Path) -> None:
    """Issue 15's candidate "temperature in rollouts vs training": log-probs at another
    temperature than the one sampled at are another policy's, so the plan refuses them."""
    cfg = _tiny_train(
        tmp_path,
        agent={"sampling": {"temperature": 0.7}},
        trainer={"model": {"path": "runs/tiny-model"}, "rl": {"temperature": 1.0}},
    )
    with pytest.raises(PlanError, match=r"trainer.rl.temperature: 1.0 differs from .* 0.7"):
        resolve_train(cfg)
    cfg.trainer.rl.temperature = 0.7
    assert resolve_train(cfg).config.trainer.rl.temperature == 0.7
    cfg.agent.sampling.temperature = 0.0  # greedy rollouts: any scoring temperature is allowed
    resolve_train(cfg)


def test_evaluation_problems_are_checked_too(tmp_path: Path) -> None:
    cfg = _tiny_train(tmp_path, evaluate={"problems": {"ids": ["tanhh"]}})
    with pytest.raises(PlanError, match=r"evaluate.problems.ids: unknown problem 'tanhh'"):
        resolve_train(cfg)


def test_filters_that_match_nothing_say_so(tmp_path: Path) -> None:
    cfg = _tiny_train(tmp_path, problems={"category": "elementwise", "level": 2})
    with pytest.raises(PlanError, match=r"no problem of suite 'builtin'.*problems list"):
        resolve_train(cfg)


def test_model_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "m"
    model.mkdir()
    with pytest.raises(PlanError, match=r"no config\.json"):
        check_model("k", str(model))
    (model / "config.json").write_text("{}")
    assert check_model("k", str(model)).source == "local"
    assert check_model("k", "Qwen/Qwen3-0.6B").source in ("hub", "local")
    assert check_model("k", "later/final", pending=["later/final"]).source == "pending"
    with pytest.raises(PlanError, match=r"tritonforge sft --run-dir out/sft"):
        check_model("k", "out/sft/final")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(PlanError, match="not in the Hugging Face cache and the hub is offline"):
        check_model("k", "nobody-org/no-such-model")


def test_hf_engine_takes_pause_mode_wait_or_keep(tmp_path: Path) -> None:
    cfg = TrainRunConfig.model_validate({"run_dir": str(tmp_path / "r")})
    for mode in ("wait", "keep"):
        cfg.engine.pause_mode = mode
        resolve_train(cfg)
    cfg.engine.pause_mode = "abort"
    with pytest.raises(PlanError, match=r"engine\.pause_mode: the hf engine takes wait or keep"):
        resolve_train(cfg)


def test_run_dir_must_be_a_folder(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(PlanError, match="is not a folder"):
        check_run_dir("run_dir", str(tmp_path / "f"))
    assert check_run_dir("run_dir", str(tmp_path / "a" / "b")) == tmp_path / "a" / "b"


def test_demo_plan_points_each_step_at_the_previous_one(tmp_path: Path) -> None:
    cfg = load_config(DemoConfig, None, [f'run_dir="{tmp_path / "demo"}"'], base=DemoConfig())
    plan = resolve_demo(cfg)
    final = str(tmp_path / "demo" / "sft" / "final")
    assert plan.sft.model.source == "pending" and plan.train.policy.source == "pending"
    assert plan.train.config.engine.model_path == final == plan.train.config.trainer.model.path
    assert plan.tiny_model == tmp_path / "demo" / "tiny-model"
    # the KL anchor's reference is the SFT model the policy starts from (docs/benchmarks.md,
    # "A KL anchor against forgetting": without it the SFT problems were forgotten)
    loss, model = plan.train.config.trainer.loss, plan.train.config.trainer.model
    assert loss.kl_coef == 0.5  # > 0: the trainer loads the reference model
    assert model.reference_path is None and model.path == final


def test_sft_plan_checks_the_builtin_problem_names(tmp_path: Path) -> None:
    cfg = SFTRunConfig.model_validate(
        {"run_dir": str(tmp_path), "sft": {"data": {"builtin_problems": ["relu", "sigmod"]}}}
    )
    with pytest.raises(PlanError, match=r"unknown problem 'sigmod'; did you mean 'sigmoid'"):
        resolve_sft(cfg)
    cfg.sft.data.builtin_problems = ["relu", "builtin/sigmoid"]
    assert resolve_sft(cfg).model.source == "tiny"


def test_eval_plan_resolves_auto_to_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    from tritonforge.config.eval import EvalSettings

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert resolve_eval(EvalSettings()).device == "cpu"
    with pytest.raises(PlanError, match="the CUDA C\\+\\+ backend needs a GPU"):
        resolve_eval(EvalSettings(device="cpu", backend="cuda"))


# -- eval-kernel's size estimate ---------------------------------------------------------------
def test_size_warning_for_the_builtin_gpu_size_file_names_the_cpu_preset() -> None:
    from tritonforge.config.eval import Budgets
    from tritonforge.problems.workload import cpu_warning, measure_workload

    ref = REPO / "src/tritonforge/problems/builtin/elementwise/relu.py"
    work = measure_workload(ref.read_text())
    assert work.input_bytes == work.output_bytes == 16384 * 8192 * 4  # on meta: nothing allocated
    budgets = Budgets().model_dump()
    warning = cpu_warning(work, 5, budgets, ref)
    assert warning is not None and "moves 1.0 GiB" in warning and "beyond the budgets" in warning
    assert "tritonforge problems show relu --size cpu > relu_cpu.py" in warning
    from tritonforge.problems import load_suite, select

    small = select(load_suite("builtin", size="cpu"), ids=["relu"])[0]
    assert cpu_warning(measure_workload(small.reference_src), 5, budgets, ref) is None


def test_size_warning_counts_flops_for_matmul() -> None:
    from tritonforge.config.eval import Budgets
    from tritonforge.problems.workload import cpu_warning, measure_workload

    ref = REPO / "src/tritonforge/problems/builtin/matmul/matmul_square.py"
    work = measure_workload(ref.read_text())
    assert work.flops == 2 * 4096**3
    warning = cpu_warning(work, 5, Budgets().model_dump(), ref)
    assert warning is not None and "FLOPs" in warning and "matmul_square --size cpu" in warning


# -- the driver's typed pieces -----------------------------------------------------------------
def test_driver_pieces_satisfy_the_protocols() -> None:
    import inspect

    from tritonforge.rollout.agent import Agent
    from tritonforge.scale.rollout_pool import RayAgent
    from tritonforge.scale.trainer_group import TrainerGroup
    from tritonforge.training.metrics import MetricsLogger
    from tritonforge.training.pieces import EpisodeRunner, MetricsSink, PolicyTrainer
    from tritonforge.training.rl import RLTrainer

    def members(proto: type) -> set[str]:
        return {n for n, v in vars(proto).items() if callable(v) or isinstance(v, property)} - {
            n for n in vars(object)
        }

    for cls in (RLTrainer, TrainerGroup):
        missing = {n for n in members(PolicyTrainer) if not n.startswith("_")} - set(dir(cls))
        assert not missing, (cls, missing)
    ray_agent = RayAgent(pool=None, engine=object(), params=object())  # type: ignore[arg-type]
    assert isinstance(ray_agent, EpisodeRunner)
    init = inspect.getsource(Agent.__init__)
    assert (
        "self.engine" in init and "self.params" in init and inspect.iscoroutinefunction(Agent.run)
    )
    assert members(MetricsSink) <= set(dir(MetricsLogger))
