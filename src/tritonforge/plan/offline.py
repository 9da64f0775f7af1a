"""The offline policies a run can fall back to: their names and folders, known before a build.

Covers: `OFFLINE_MODELS` (name -> builder; each name is registered by jobs.offline_models, which
builds the model, when that module is imported) and `offline_model_dir` (the folder a name's
model is built in, under runs/offline-models/). A plan checks `offline_fallback` against these
names and counts the folder as made by the run, without importing what builds it.
Does not cover: building (jobs.offline_models) or when a fallback applies
(plan.runs.resolve_policy_fallback).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tritonforge.config.registry import Registry

__all__ = ["OFFLINE_MODELS", "OFFLINE_ROOT", "offline_model_dir"]

OFFLINE_ROOT = Path("runs/offline-models")
_BUILDERS = "tritonforge.jobs.offline_models"  # registers every name below when imported
OFFLINE_MODELS: Registry[Callable[[Path], Path]] = Registry(
    "offline model", dict.fromkeys(("tiny", "tiny-sft", "qwen3-0.6b-shape"), _BUILDERS), unique=True
)


def offline_model_dir(name: str, root: Path = OFFLINE_ROOT) -> Path:
    """The folder of offline model `name` (tiny-sft: the SFT run's final model)."""
    return root / "tiny-sft" / "final" if name == "tiny-sft" else root / name
