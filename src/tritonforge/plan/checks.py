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
from tritonforge.config.engine import EngineConfig
from tritonforge.config.eval import EvalSettings
from tritonforge.config.names import unknown_name
from tritonforge.config.rollout import EvalBackendConfig
from tritonforge.config.task import TaskConfig
from tritonforge.config.train import LossConfig
from tritonforge.hardware import gpu_presence
from tritonforge.plan import PlanError

TINY_MODEL_DIR = "runs/tiny-model"  # rollout.tiny_model.DEFAULT_TINY_MODEL_DIR: built on use
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_name(key: str, kind: str, name: str, known: Collection[str]) -> str:
    """`name` if registered, else PlanError `KEY: unknown KIND 'x'; did you mean ...`."""
    if name not in known:
        raise PlanError(f"{key}: {unknown_name(kind, name, known)}")
    return name


def check_reward(key: str, settings: EvalSettings) -> None:
    from tritonforge.evaluation.judge.rewards import REWARDS

    check_name(f"{key}.reward", "reward", settings.reward, REWARDS)


def check_loss(key: str, loss: LossConfig) -> None:
    """Built-in losses are checked by the config itself; this adds run-time registered ones."""
    from tritonforge.config.train import known_losses

    check_name(f"{key}.type", "loss", loss.type, known_losses())


def check_buffer(key: str, cfg: BufferConfig) -> None:
    from tritonforge.rollout.buffer import STAGE_TABLES

    for what, table in STAGE_TABLES.items():
        check_name(f"{key}.{what}", f"buffer {what} stage", getattr(cfg, what), table)


def check_agent(key: str, cfg: AgentConfig) -> None:
    from tritonforge.rollout.returns import RETURNS

    check_name(f"{key}.returns.type", "returns mode", cfg.returns.type, RETURNS)


def check_task(key: str, cfg: TaskConfig) -> None:
    from tritonforge.rollout.prompts import load_template
    from tritonforge.rollout.tasks import TASKS

    check_name(f"{key}.type", "task", cfg.type, TASKS)
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
    """Reward name; a GPU for device=cuda or the CUDA C++ backend."""
    check_reward(key, s)
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


def check_engine(key: str, cfg: EngineConfig, pending: Iterable[str] = ()) -> ModelRef:
    """Registered type, URLs, device; the model the engine (or its tokenizer) loads."""
    from tritonforge.rollout.engines.base import ENGINES

    check_name(f"{key}.type", "engine", cfg.type, ENGINES)
    if cfg.type == "hf" and cfg.device.startswith("cuda"):
        check_gpu(f"{key}.device", f"device {cfg.device!r}")
    if cfg.type == "hf" and cfg.pause_mode == "abort":
        raise PlanError(f"{key}.pause_mode: the hf engine takes wait or keep, not abort")
    if cfg.type in ("vllm", "sglang"):
        check_url(f"{key}.url", cfg.url)
    if cfg.type == "balanced":
        check_urls(f"{key}.urls", cfg.urls, "a balanced engine")
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
