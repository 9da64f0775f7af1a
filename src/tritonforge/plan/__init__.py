"""Resolve, then run: each command's config becomes one typed, fully checked plan first.

Covers: `PlanError` (a request that cannot be served as asked; the CLI prints it in one line and
exits 2) and the plans of the commands (`plan.runs`): problems resolved (`plan.problems`),
registry names checked (rewards, losses, returns, buffer stages, engines, tasks, prompt
templates), model paths, devices and run dirs checked (`plan.checks`). Nothing here imports
torch, loads weights, starts a worker or writes a file: a plan that resolves leaves no trace,
so a refused request costs seconds, not a model load. Does not cover: building the engine,
evaluator or trainer from a plan (the commands and jobs.loop do that next).
"""

from __future__ import annotations

from tritonforge.config import ConfigError

__all__ = ["PlanError"]


class PlanError(ConfigError):
    """What in the config cannot be served (the message names the key and what would work)."""
