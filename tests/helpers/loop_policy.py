"""The policy of the single-device loop tests: the tiny model after a short SFT on relu.

A random tiny model writes no code, so the judge would never run; 40 SFT steps on relu's
solution (the compact system prompt, no example) make it write relu kernels the judge checks.
`LOOP_PROMPT` are the matching task overrides of a run config.
"""

from __future__ import annotations

from pathlib import Path

LOOP_PROMPT = ["task.prompt.include_example=false", "task.prompt.system_template='system_compact'"]


def relu_policy(root: Path) -> Path:
    """Build the tiny model under `root` and SFT it; returns the SFT model folder."""
    from tritonforge.config import load_config
    from tritonforge.config.train import SFTRunConfig
    from tritonforge.rollout.tiny_model import ensure_tiny_model
    from tritonforge.training.sft import run_sft

    tiny = ensure_tiny_model(root / "tiny")
    cfg = load_config(SFTRunConfig, None, [
        f"run_dir='{root / 'sft'}'", f"model.path='{tiny}'",
        "sft.data.builtin_problems=['relu']", "sft.data.thinking='none'",
        "sft.data.prompt.include_example=false",
        "sft.data.prompt.system_template='system_compact'",
        "sft.max_steps=40", "sft.batch_size=2", "sft.epochs=1000", "optim.lr=3e-3",
        "logging.progress=false", "checkpoint.save_final=false", "model.compile='off'",
    ])  # fmt: skip
    return Path(run_sft(cfg).model_dir)
