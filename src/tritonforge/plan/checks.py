"""The checks a plan is made of: registry names, model paths, devices, run dirs, URLs.

Covers: one function per kind of check, each returning the resolved value or raising
`PlanError` with one line naming the config key, the bad value and what would work ("did you
mean" among registered names, the command that makes a missing model, the reason a GPU is not
usable). Torch-free: registries are read from torch-free modules; model folders are looked at,
not loaded. Does not cover: problems (plan.problems) or assembling the checks (plan.runs).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from tritonforge.config.agent import AgentConfig
from tritonforge.config.buffer import BufferConfig
from tritonforge.config.engine import ENGINES, EngineConfigBase
from tritonforge.config.eval import EvalSettings
from tritonforge.config.names import unknown_name
from tritonforge.config.registry import Registry
from tritonforge.config.rollout import EvalBackendConfig
from tritonforge.config.task import TaskConfig
from tritonforge.config.train import LOSSES, LossConfig
from tritonforge.hardware import gpu_presence
from tritonforge.plan import PlanError

TINY_MODEL_DIR = "runs/tiny-model"  # rollout.tiny_model.DEFAULT_TINY_MODEL_DIR: built on use
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_name(key: str, kind: str, name: str, known: Collection[str]) -> str:
    """`name` if registered, else PlanError `KEY: unknown KIND 'x'; did you mean ...`."""
    if name not in known:
        raise PlanError(f"{key}: {unknown_name(kind, name, known)}")
    return name


def check_reward(key: str, name: str | None) -> None:
    """A reward name (None: the preset's conventional one) the task side knows."""
    from tritonforge.rollout.rewards import REWARDS

    if name is not None:
        check_registered(key, REWARDS, name)


def check_registered(key: str, registry: Registry, name: str) -> str:
    """`name` if `registry` has it (nothing imported), else PlanError `KEY: unknown KIND ...`."""
    if name not in registry:
        raise PlanError(f"{key}: {registry.unknown(name)}")
    return name


def check_loss(key: str, loss: LossConfig) -> None:
    """LossConfig checks the name when it is set; checked here with the other registry names."""
    check_registered(f"{key}.type", LOSSES, loss.type)


def check_buffer(key: str, cfg: BufferConfig) -> None:
    from tritonforge.rollout.buffer import STAGE_TABLES

    for what, table in STAGE_TABLES.items():
        check_registered(f"{key}.{what}", table, getattr(cfg, what))


def check_agent(key: str, cfg: AgentConfig) -> None:
    from tritonforge.rollout.returns import RETURNS

    check_registered(f"{key}.returns.type", RETURNS, cfg.returns.type)


def check_task(key: str, cfg: TaskConfig) -> None:
    from tritonforge.rollout.prompts import load_template
    from tritonforge.rollout.tasks import TASKS

    check_registered(f"{key}.type", TASKS, cfg.type)
    check_reward(f"{key}.reward", cfg.reward)
    templates = [("system_template", cfg.prompt.system_template)]
    templates.append(("user_template", cfg.prompt.user_template))
    if cfg.prompt.include_example:
        templates.append(("example_template", cfg.prompt.example_template))
    for field, name in templates:
        try:
            load_template(name)
        except (FileNotFoundError, OSError) as exc:
            raise PlanError(f"{key}.prompt.{field}: {exc}") from None


def check_url(key: str, url: str) -> str:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise PlanError(f"{key}: {url!r} is not an http(s) URL like http://127.0.0.1:8000")
    return url


def check_urls(key: str, urls: list[str], what: str) -> None:
    if not urls:
        raise PlanError(f"{key}: {what} needs at least one URL")
    for i, url in enumerate(urls):
        check_url(f"{key}[{i}]", url)


def check_gpu(key: str, what: str) -> None:
    """PlanError unless a GPU can be used by this process (device nodes, visibility vars)."""
    presence = gpu_presence()
    if not presence.available:
        raise PlanError(f"{key}: {what} needs a GPU, but {presence.reason}; use cpu instead")


def check_eval_settings(key: str, s: EvalSettings) -> None:
    """A GPU for device=cuda or the CUDA C++ backend."""
    if s.device == "cuda":
        check_gpu(f"{key}.device", "device 'cuda'")
    if s.backend == "cuda":
        check_gpu(f"{key}.backend", "the CUDA C++ backend")


def check_eval_backend(key: str, cfg: EvalBackendConfig) -> None:
    check_eval_settings(f"{key}.settings", cfg.settings)
    if cfg.type == "http":
        check_urls(f"{key}.urls", cfg.urls, "an http evaluation backend")


@dataclass(frozen=True)
class ModelRef:
    """A model the run will load: where it comes from, known before anything is loaded.

    source: `local` (a folder with config.json), `hub` (a Hugging Face id, from its cache or the
    network), `tiny` (the tiny model, built on first use), `pending` (an earlier step of the same
    command writes it)."""

    path: str
    source: Literal["local", "hub", "tiny", "pending"]


def _missing_model_hint(path: Path) -> str:
    if path.name == "final":
        return (
            f"; it is what `tritonforge sft --run-dir {path.parent}` writes"
            + (" (and `tritonforge demo` does)" if path.parent == Path("runs/demo/sft") else "")
            + ": run that first, or point the key at another model folder"
        )
    return "; point it at a Hugging Face model folder (config.json + weights + tokenizer)"


def _offline() -> bool:
    return any(
        os.environ.get(v, "") not in ("", "0") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _in_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - transformers depends on it
        return False
    found = try_to_load_from_cache(repo_id, "config.json")
    return isinstance(found, str)


def hub_unavailable(path: str) -> str | None:
    """Why `path`, a Hugging Face hub id, cannot be loaded here (not in the cache, and the hub
    offline or unreachable); None when it can, or when `path` is no hub id (a folder)."""
    first = Path(path).parts[0] if Path(path).parts else ""
    if not _HUB_ID.match(path) or Path(path).expanduser().exists() or Path(first).is_dir():
        return None
    if _in_hub_cache(path):
        return None
    if _offline():
        return f"{path} is not in the Hugging Face cache and the hub is offline (HF_HUB_OFFLINE)"
    from tritonforge.problems.kernelbench import _hub_reachable  # the one reachability probe

    if not _hub_reachable():
        return f"{path} is not in the Hugging Face cache and the hub cannot be reached"
    return None


def check_model(key: str, path: str, pending: Iterable[str] = ()) -> ModelRef:
    """Where model `path` (config key `key`) comes from; PlanError if it cannot be loaded."""
    p = Path(path).expanduser()
    if any(p == Path(x) for x in pending):
        return ModelRef(path, "pending")
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise PlanError(f"{key}: {path} is not a Hugging Face model folder (no config.json)")
        return ModelRef(path, "local")
    if p == Path(TINY_MODEL_DIR):
        return ModelRef(path, "tiny")
    if p.exists():
        raise PlanError(f"{key}: {path} is a file; a model is a folder")
    first = Path(path).parts[0] if Path(path).parts else ""
    if _HUB_ID.match(path) and not Path(first).is_dir():
        if _offline() and not _in_hub_cache(path):
            raise PlanError(
                f"{key}: {path} is not in the Hugging Face cache and the hub is offline"
            )
        return ModelRef(path, "hub")
    raise PlanError(f"{key}: model {path} does not exist{_missing_model_hint(p)}")


def check_engine(key: str, cfg: EngineConfigBase, pending: Iterable[str] = ()) -> ModelRef:
    """Registered type; what its abilities need (devices of a kind it runs on and usable here, a
    pause mode it honours, server URLs); the model the engine (or its tokenizer) loads."""
    check_registered(f"{key}.type", ENGINES, cfg.type)
    able = cfg.abilities
    for device in cfg.devices():
        kind = device.split(":")[0]
        if kind not in able.device_kinds:
            runs_on = " or ".join(able.device_kinds)
            raise PlanError(
                f"{key}.device: the {cfg.type} engine runs on {runs_on}, not {device!r}"
            )
        if kind == "cuda":
            check_gpu(f"{key}.device", f"device {device!r}")
    mode = getattr(cfg, "pause_mode", None)
    if mode is not None and mode not in able.pause_modes:
        takes = " or ".join(able.pause_modes)
        raise PlanError(f"{key}.pause_mode: the {cfg.type} engine takes {takes}, not {mode}")
    for field, urls in cfg.endpoint_keys().items():
        if isinstance(urls, str):
            check_url(f"{key}.{field}", urls)
        else:
            check_urls(f"{key}.{field}", urls, f"a {cfg.type} engine")
    return check_model(f"{key}.model_path", cfg.model_path, pending)


def check_run_dir(key: str, path: str) -> Path:
    """The run dir (not created): not a file, and its nearest existing parent is writable."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise PlanError(f"{key}: {path} exists and is not a folder")
    parent = p
    while not parent.exists():
        parent = parent.parent
    if not os.access(parent, os.W_OK):
        raise PlanError(f"{key}: cannot write under {parent}")
    return p


def check_file(key: str, path: str) -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        raise PlanError(f"{key}: {path} does not exist")
    return p
