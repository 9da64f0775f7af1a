"""Step metrics: one fixed-format line per step, JSONL, TensorBoard and (optional) W&B.

Covers: `format_step_line` (fixed key order and number formats; keys absent from the metrics
are left out, so the driver's reward/pass keys and the trainer's keys share one line),
`MetricsLogger` (rank 0 writes RUN_DIR/metrics.jsonl, RUN_DIR/tb if tensorboard is installed and
enabled, W&B if a project is set; both imported lazily) and `to_floats`.
Does not cover: computing the metrics (trainers, buffer) or plots and reports.

Line example: `step 12 | loss 0.1234 | reward 0.41 | pass 0.38 | kl 0.0012 | clip 0.08 |
gnorm 1.23 | tok/s 1540 | lr 1.0e-05 | time 0.91s | wall 6.2s | gen 5.1s | judge 4.0s | timing
0.8s | train 0.9s | sync 0.01s | idle 0.2s | gpu 0.74 | gen tok/s 2210 | verdicts/min 93.0 | mem
21.3G` (printed through the `tritonforge.train` logger).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tritonforge.config.train import LoggingConfig
from tritonforge.logging_setup import get_logger

__all__ = ["LINE_FIELDS", "MetricsLogger", "format_step_line", "to_floats"]

log = get_logger("tritonforge.train")

# (metric key, label in the line, format). Order is the line's order.
LINE_FIELDS: list[tuple[str, str, str]] = [
    ("loss", "loss", "{:.4f}"),
    ("reward", "reward", "{:.2f}"),
    ("pass", "pass", "{:.2f}"),
    ("speedup", "speedup", "{:.2f}x"),
    ("repair", "repair", "{:.2f}"),
    ("kl", "kl", "{:.4f}"),
    ("clip_fraction", "clip", "{:.2f}"),
    ("entropy", "ent", "{:.3f}"),
    ("logprob_gap", "gap", "{:.4f}"),
    ("grad_norm", "gnorm", "{:.2f}"),
    ("tokens_per_s", "tok/s", "{:.0f}"),
    ("lr", "lr", "{:.1e}"),
    ("time_s", "time", "{:.2f}s"),
    # where the step's wall time went (training.accounting; stages overlap in the async schedule)
    ("wall_s", "wall", "{:.1f}s"),
    ("generate_s", "gen", "{:.1f}s"),
    ("judge_s", "judge", "{:.1f}s"),
    ("judge_timing_s", "timing", "{:.1f}s"),
    ("train_s", "train", "{:.1f}s"),
    ("sync_s", "sync", "{:.2f}s"),
    ("idle_s", "idle", "{:.1f}s"),
    ("gpu_busy", "gpu", "{:.2f}"),
    ("gen_tokens_per_s", "gen tok/s", "{:.0f}"),
    ("verdicts_per_min", "verdicts/min", "{:.1f}"),
    ("gpu_mem_peak_gib", "mem", "{:.1f}G"),
]


def to_floats(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Numeric entries as floats (tensors via .item()); other values dropped."""
    out: dict[str, float] = {}
    for k, v in metrics.items():
        if hasattr(v, "item") and getattr(v, "numel", lambda: 1)() == 1:
            v = v.item()
        if isinstance(v, bool):
            v = float(v)
        if isinstance(v, (int, float)):
            out[k] = float(v)
    return out


def _fmt(fmt: str, value: float) -> str:
    return "nan" if math.isnan(value) else fmt.format(value)


def format_step_line(step: int, metrics: Mapping[str, Any]) -> str:
    """`step N | key value | ...` over LINE_FIELDS present in `metrics`."""
    vals = to_floats(metrics)
    parts = [f"step {step}"]
    parts += [f"{label} {_fmt(fmt, vals[key])}" for key, label, fmt in LINE_FIELDS if key in vals]
    return " | ".join(parts)


class MetricsLogger:
    """Writes each step's metrics to the configured sinks (only on the main rank)."""

    def __init__(self, run_dir: str | Path | None, cfg: LoggingConfig | None = None,
                 is_main: bool = True, run_config: Mapping[str, Any] | None = None) -> None:  # fmt: skip
        self.cfg = cfg or LoggingConfig()
        self.is_main = is_main
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self._jsonl = None
        self._tb = None
        self._wandb = None
        if not is_main or self.run_dir is None:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.cfg.jsonl:
            self._jsonl = (self.run_dir / "metrics.jsonl").open("a", encoding="utf-8")
        if self.cfg.tensorboard:
            self._tb = self._open_tensorboard()
        if self.cfg.wandb_project:
            self._wandb = self._open_wandb(run_config)

    def _open_tensorboard(self) -> Any:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            log.warning("tensorboard not installed (pip install tritonforge[tensorboard]); skipped")
            return None
        return SummaryWriter(log_dir=str(self.run_dir / "tb"))

    def _open_wandb(self, run_config: Mapping[str, Any] | None) -> Any:
        try:
            import wandb
        except ImportError:
            log.warning("wandb not installed; W&B logging skipped")
            return None
        return wandb.init(
            project=self.cfg.wandb_project,
            entity=self.cfg.wandb_entity,
            dir=str(self.run_dir),
            config=dict(run_config or {}),
        )

    def log(self, step: int, metrics: Mapping[str, Any], prefix: str = "") -> str:
        """Record one step; returns the fixed-format line (also logged every `every_steps`)."""
        line = format_step_line(step, metrics)
        if not self.is_main:
            return line
        vals = to_floats(metrics)
        if step % self.cfg.every_steps == 0:
            log.info(line)
        if self._jsonl is not None:
            row = {"step": step, "time": round(time.time(), 3), **vals}
            self._jsonl.write(json.dumps(row, sort_keys=True) + "\n")
            self._jsonl.flush()
        if self._tb is not None:
            for k, v in vals.items():
                self._tb.add_scalar(f"{prefix}{k}", v, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log({f"{prefix}{k}": v for k, v in vals.items()}, step=step)
        return line

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
