"""The plans of the commands: one frozen record per command, built by one `resolve_*` each.

Covers: `EvalPlan` (eval-kernel, eval-dir, the judge's settings and device), `EpisodePlan`
(what playing episodes needs: engine model, problems, checked task/agent/eval sections),
`RolloutPlan`, `BenchPlan`, `TrainPlan` (plus the trainer's models, the loss, the buffer, the
run dir, Ray), `SFTPlan`, `ComparePlan` and `DemoPlan` (whose later steps use models the earlier
steps write: `pending`). A plan holds the config it came from, so a run reads everything from
the plan. Torch-free; nothing is created or loaded. Does not cover: running a plan (commands,
jobs.loop, scale.driver).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from tritonforge.config import with_overrides
from tritonforge.config.demo import DemoConfig
from tritonforge.config.engine import ENGINES
from tritonforge.config.eval import EvalSettings
from tritonforge.config.rollout import BenchConfig, EpisodeSections, RolloutConfig
from tritonforge.config.run import CompareConfig, TrainRunConfig
from tritonforge.config.train import SFTRunConfig
from tritonforge.hardware import gpu_presence
from tritonforge.plan import PlanError
from tritonforge.plan.checks import (
    ModelRef,
    check_agent,
    check_buffer,
    check_engine,
    check_eval_backend,
    check_eval_settings,
    check_file,
    check_gpu,
    check_loss,
    check_model,
    check_name,
    check_run_dir,
    check_task,
    hub_unavailable,
)
from tritonforge.plan.offline import OFFLINE_MODELS, offline_model_dir
from tritonforge.plan.problems import load_checked, resolve_problems
from tritonforge.types import Problem

__all__ = [
    "BenchPlan",
    "ComparePlan",
    "DemoPlan",
    "EpisodePlan",
    "EvalPlan",
    "RolloutPlan",
    "SFTPlan",
    "TrainPlan",
    "resolve_bench",
    "resolve_compare",
    "resolve_demo",
    "resolve_eval",
    "resolve_rollout",
    "resolve_sft",
    "resolve_train",
]


@dataclass(frozen=True)
class EvalPlan:
    """Judge settings checked (devices) and the device they resolve to here."""

    settings: EvalSettings
    device: Literal["cpu", "cuda"]


def resolve_eval(settings: EvalSettings, key: str = "settings") -> EvalPlan:
    check_eval_settings(key, settings)
    if settings.device == "auto":
        return EvalPlan(settings, "cuda" if gpu_presence().available else "cpu")
    return EvalPlan(settings, settings.device)


@dataclass(frozen=True)
class EpisodePlan:
    """What playing episodes needs, checked: the engine's model (its tokenizer too), problems."""

    engine_model: ModelRef
    problems: list[Problem]


def resolve_episodes(cfg: EpisodeSections, pending: Iterable[str] = ()) -> EpisodePlan:
    problems = resolve_problems(cfg.problems)
    check_task("task", cfg.task)
    check_agent("agent", cfg.agent)
    check_eval_backend("eval", cfg.eval)
    return EpisodePlan(check_engine("engine", cfg.engine, tuple(pending)), problems)


@dataclass(frozen=True)
class RolloutPlan:
    config: RolloutConfig
    episodes: EpisodePlan
    output: Path


def resolve_rollout(cfg: RolloutConfig) -> RolloutPlan:
    episodes = resolve_episodes(cfg)
    check_buffer("buffer", cfg.buffer)
    output = Path(cfg.output)
    if output.suffix not in (".jsonl", ".parquet"):
        raise PlanError(f"output: {cfg.output} must end in .jsonl or .parquet")
    check_run_dir("output", str(output.parent))
    return RolloutPlan(cfg, episodes, output)


@dataclass(frozen=True)
class BenchPlan:
    config: BenchConfig
    episodes: EpisodePlan
    out: Path


def resolve_bench(cfg: BenchConfig) -> BenchPlan:
    return BenchPlan(cfg, resolve_episodes(cfg), check_run_dir("out", cfg.out))


@dataclass(frozen=True)
class TrainPlan:
    """An RL run, checked: episodes, the trainer's models, evaluation problems, the run dir;
    `offline_model`: the offline model (plan.offline) the run builds first, when
    `offline_fallback` replaced the policy; `fallback_note` says what was replaced and why."""

    config: TrainRunConfig
    episodes: EpisodePlan
    eval_problems: list[Problem]
    eval_sets: dict[str, list[Problem]]
    policy: ModelRef
    tokenizer: ModelRef
    reference: ModelRef | None
    run_dir: Path
    ray: bool
    offline_model: str | None = None
    fallback_note: str | None = None

    @property
    def problems(self) -> list[Problem]:
        return self.episodes.problems

    def with_config(self, cfg: TrainRunConfig) -> TrainPlan:
        """The same plan over `cfg` (same problems), e.g. with paths made absolute for Ray."""
        return replace(self, config=cfg, run_dir=Path(cfg.run_dir))


def _check_ray() -> None:
    if importlib.util.find_spec("ray") is None:
        raise PlanError("scale.enabled: Ray is not installed (pip install 'tritonforge[ray]')")


def check_temperatures(cfg: TrainRunConfig) -> None:
    """The trainer scores tokens at the temperature the engine sampled them with: log-probs at
    another temperature belong to a different policy (wrong gradients, a false rollout/train gap).
    """
    sampled, scored = cfg.agent.sampling.temperature, cfg.trainer.rl.temperature
    if sampled > 0 and abs(sampled - scored) > 1e-9:
        raise PlanError(
            f"trainer.rl.temperature: {scored} differs from agent.sampling.temperature "
            f"{sampled}; the trainer's log-probs must be those of the sampling policy "
            "(set both)"
        )


_POLICY_KEYS = (
    "engine.model_path",
    "trainer.model.path",
    "trainer.model.tokenizer_path",
    "trainer.model.reference_path",
)


def _get(cfg: TrainRunConfig, key: str) -> str | None:
    obj: object = cfg
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


def resolve_policy_fallback(cfg: TrainRunConfig) -> tuple[TrainRunConfig, str | None, str | None]:
    """(cfg, offline model to build, note): with `offline_fallback` set, every policy path of
    _POLICY_KEYS that names a hub id this machine cannot load is replaced by the fallback's
    folder (an offline model's, built by the run, or a model folder). Nothing changes when
    every path loads here, or when no fallback is set (the checks then refuse the run)."""
    fallback = cfg.offline_fallback
    if fallback is None:
        return cfg, None, None
    paths = {k: p for k in _POLICY_KEYS if (p := _get(cfg, k))}
    reasons = {p: hub_unavailable(p) for p in set(paths.values())}  # one probe per path
    why = {k: reasons[p] for k, p in paths.items() if reasons[p]}
    if not why:
        return cfg, None, None
    if fallback in OFFLINE_MODELS:
        folder, build = str(offline_model_dir(fallback)), fallback
    else:
        folder, build = check_model("offline_fallback", fallback).path, None
    overrides = [f"{k}={json.dumps(folder)}" for k in why]
    first = next(iter(why.values()))
    note = f"offline_fallback {fallback} ({folder}) for {', '.join(why)}: {first}"
    return with_overrides(cfg, overrides), build, note


def resolve_train(cfg: TrainRunConfig, pending: Iterable[str] = (), ray: bool = False) -> TrainPlan:
    """Check everything an RL run needs, in the order a user reads the config."""
    cfg, offline_model, fallback_note = resolve_policy_fallback(cfg)
    pending = tuple(pending)
    if offline_model is not None:  # built by the run, before anything loads
        pending += (str(offline_model_dir(offline_model)),)
    episodes = resolve_episodes(cfg, pending)
    check_buffer("buffer", cfg.buffer)
    model = cfg.trainer.model
    check_loss("trainer.loss", cfg.trainer.loss)
    policy = check_model("trainer.model.path", model.path, pending)
    tokenizer = (
        check_model("trainer.model.tokenizer_path", model.tokenizer_path, pending)
        if model.tokenizer_path
        else policy
    )
    reference = None
    if cfg.trainer.loss.kl_coef > 0 and model.reference_path:
        reference = check_model("trainer.model.reference_path", model.reference_path, pending)
    if cfg.trainer.dist.backend == "nccl":
        check_gpu("trainer.dist.backend", "the nccl backend")
    check_temperatures(cfg)
    if cfg.weight_sync == "state_dict" and not cfg.engine.abilities.state_dict_weights:
        able = [n for n in ENGINES.names() if ENGINES[n].abilities.state_dict_weights]
        raise PlanError(
            f"weight_sync: state_dict needs the in-process engine taking weights in memory "
            f"({', '.join(able)}), not {cfg.engine.type}; use disk or auto"
        )
    ev = cfg.evaluate
    eval_problems = episodes.problems
    if ev.enabled and ev.problems is not None:
        eval_problems = resolve_problems(ev.problems, "evaluate.problems")
    eval_sets = {
        name: resolve_problems(pc, f"evaluate.extra.{name}") for name, pc in ev.extra.items()
    }
    ray = ray or cfg.scale.enabled
    if ray:
        _check_ray()
    run_dir = check_run_dir("run_dir", cfg.run_dir)
    return TrainPlan(
        cfg, episodes, eval_problems, eval_sets, policy, tokenizer, reference, run_dir, ray,
        offline_model, fallback_note,
    )  # fmt: skip


@dataclass(frozen=True)
class ComparePlan:
    config: CompareConfig
    variants: dict[str, TrainPlan]


def resolve_compare(cfg: CompareConfig) -> ComparePlan:
    variants = {}
    for name, overrides in cfg.variants.items():
        variant = with_overrides(cfg.base, [*overrides, f'run_dir="{cfg.run_dir}/{name}"'])
        variants[name] = resolve_train(variant)
    return ComparePlan(cfg, variants)


@dataclass(frozen=True)
class SFTPlan:
    config: SFTRunConfig
    model: ModelRef
    tokenizer: ModelRef
    run_dir: Path


def resolve_sft(cfg: SFTRunConfig, pending: Iterable[str] = ()) -> SFTPlan:
    pending = tuple(pending)
    model = check_model("model.path", cfg.model.path, pending)
    tokenizer = (
        check_model("model.tokenizer_path", cfg.model.tokenizer_path, pending)
        if cfg.model.tokenizer_path
        else model
    )
    data = cfg.sft.data
    if data.kind in ("kernelbook", "chat"):
        if not data.path:
            raise PlanError(f"sft.data.path: data kind {data.kind!r} needs a JSONL/parquet file")
        check_file("sft.data.path", data.path)
    elif data.builtin_problems:
        keys = ("sft.data.kind", "sft.data.builtin_size")
        pool = load_checked(keys, "builtin", data.builtin_size)
        names = sorted(p.name for p in pool)
        for name in data.builtin_problems:
            if name not in names and name not in {p.id for p in pool}:
                check_name("sft.data.builtin_problems", "problem", name, names)
    if cfg.dist.backend == "nccl":
        check_gpu("dist.backend", "the nccl backend")
    return SFTPlan(cfg, model, tokenizer, check_run_dir("run_dir", cfg.run_dir))


@dataclass(frozen=True)
class DemoPlan:
    """The demo's steps: tiny model -> SFT (on it) -> RL (on the SFT output)."""

    config: DemoConfig
    root: Path
    tiny_model: Path
    sft: SFTPlan
    train: TrainPlan


def resolve_demo(cfg: DemoConfig) -> DemoPlan:
    """Point the steps at each other under `run_dir`, then check both runs."""
    root = check_run_dir("run_dir", cfg.run_dir)
    cfg = cfg.model_copy(deep=True)
    tiny = root / "tiny-model"
    cfg.sft.run_dir = str(root / "sft")
    cfg.sft.model.path = str(tiny)
    final = Path(cfg.sft.run_dir) / cfg.sft.output_dir
    cfg.train.run_dir = str(root / "rl")
    cfg.train.trainer.model.path = str(final)
    cfg.train.engine.model_path = str(final)
    sft = resolve_sft(cfg.sft, pending=[str(tiny)])
    train = resolve_train(cfg.train, pending=[str(final)])
    return DemoPlan(cfg, root, tiny, sft, train)
