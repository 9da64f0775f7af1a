"""Compatibility with the original TritonForge / KernelBench eval server (POST /eval).

Covers: the request model of that server and the mapping of our Verdict into its
`KernelExecResult` answer, so existing rollout code can point at this server unchanged.
Does not cover: scheduling (service.py) or HTTP plumbing (server.py).

What this relies on (public sources, read December 2026):
- Request: `EvalRequest` in RLsys-Foundation/TritonForge `KBenchEval/scripts/eval_server_subprocess.py`
  (commit 8b3648e): original_model_src, custom_model_src, seed_num=42, num_correct_trials=5,
  num_perf_trials=100, verbose=False, measure_performance=True, preferred_device=None,
  backend="cuda". Unknown fields were ignored (pydantic default); the slime rollout
  (`slime_plugins/rollout_buffer/generator/kernel_generator.py`) sends `seed`, so extras stay
  ignored here too.
- Answer: `KernelExecResult` in `KBenchEval/src/eval.py` (same commit): compiled, correctness,
  metadata (dict), runtime (float, -1.0 when not measured; the mean of CUDA-event times in ms,
  from `get_timing_stats`), runtime_stats (mean/std/min/max/num_trials/hardware/device). Failure
  metadata keys there: compilation_error(_name), runtime_error(_name), correctness_issue,
  max_difference/avg_difference (lists of strings), correctness_trials "(p / n)". Later
  KernelBench versions add ref_runtime, ref_runtime_stats and speedup (-1.0 when unknown); we
  send those too (clients validating with the older model ignore them).
- Their rollout treats `compiled` as "the module loaded" (reward for compiling) and
  `correctness` as all trials passed; our extra metadata carries the full verdict status.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tritonforge.config.eval import EvalSettings
from tritonforge.types import Problem, Status, Verdict

# Statuses at which the candidate never got past loading: KernelBench's compiled=False.
_NOT_LOADED = {
    Status.NO_CODE,
    Status.SYNTAX_ERROR,
    Status.IMPORT_ERROR,
    Status.MISSING_MODEL_NEW,
    Status.COMPILE_ERROR,
    Status.REWARD_HACK,
    Status.INTERNAL_ERROR,
    Status.JUDGE_FAULT,
}
_COMPILE_ERRORS = {Status.SYNTAX_ERROR, Status.IMPORT_ERROR, Status.MISSING_MODEL_NEW,
                   Status.COMPILE_ERROR, Status.NO_CODE}  # fmt: skip
_MISMATCH = {Status.SHAPE_MISMATCH, Status.DTYPE_MISMATCH, Status.NUMERICAL_MISMATCH,
             Status.INPUT_MUTATED}  # fmt: skip


class KernelBenchRequest(BaseModel):
    """The original server's request; unknown fields are ignored as they were there."""

    model_config = ConfigDict(extra="ignore")

    original_model_src: str = Field(min_length=1)
    custom_model_src: str
    seed_num: int = 42
    num_correct_trials: int = Field(5, ge=1)
    num_perf_trials: int = Field(100, ge=1)
    verbose: bool = False
    measure_performance: bool = True
    preferred_device: int | None = None
    backend: Literal["cuda", "triton"] = "cuda"

    def problem(self) -> Problem:
        digest = hashlib.sha256(self.original_model_src.encode()).hexdigest()[:16]
        return Problem(
            id=f"compat/{digest}",
            suite="compat",
            name=f"compat_{digest}",
            reference_src=self.original_model_src,
        )

    def settings(self, base: EvalSettings) -> EvalSettings:
        """Our settings for this request. seed_num is ignored on purpose: seeds are hidden."""
        s = base.model_copy(deep=True)
        s.correctness_trials = min(50, self.num_correct_trials)
        s.perf_trials = min(1000, max(3, self.num_perf_trials))
        s.measure_performance = self.measure_performance
        s.backend = self.backend
        return s


def _stats(t: dict[str, Any] | None, hardware: str) -> dict[str, Any]:
    if t is None:
        return {}
    return {
        "mean": t["mean_ms"],
        "std": t["std_ms"],
        "min": t["min_ms"],
        "max": t["max_ms"],
        "median": t["median_ms"],
        "num_trials": t["trials"],
        "hardware": hardware,
        "device": hardware,
    }


def _mean_or_unknown(t: dict[str, Any] | None) -> float:
    """A timing's mean in ms, or the original's -1.0 for 'not measured' (also when non-finite:
    a client validating `runtime: float` takes no null there)."""
    return -1.0 if t is None or t["mean_ms"] is None else t["mean_ms"]


def _metadata(v: Verdict, d: dict[str, Any]) -> dict[str, Any]:
    md: dict[str, Any] = {
        "hardware": v.device,
        "device": v.device,
        "tritonforge_status": v.status.value,
        "message": v.message,
        "phase": v.phase,
        "rule": v.rule,
        "cached": v.cached,
        "correctness_trials": f"({v.trials_passed} / {v.trials_total})",
        "notes": list(d["notes"]),
    }
    error_name = f"tritonforge.{v.status.value}"
    if v.status in _COMPILE_ERRORS:
        md["compilation_error_name"] = error_name
        md["compilation_error"] = v.message
    elif v.status in _MISMATCH:
        md["correctness_issue"] = v.message
        md["correctness_issue_name"] = "correctness_issue"
        if v.mismatch is not None and v.mismatch.max_abs_diff is not None:  # strings: nan is ok
            md["max_difference"] = [f"{v.mismatch.max_abs_diff:.6f}"]
            md["avg_difference"] = [f"{(v.mismatch.mean_abs_diff or 0.0):.6f}"]
    elif v.status is not Status.CORRECT:
        md["runtime_error_name"] = error_name
        md["runtime_error"] = v.message
    if v.stderr_tail:
        md["stderr_tail"] = v.stderr_tail[-2000:]
    return md


def to_kernel_exec_result(v: Verdict) -> dict[str, Any]:
    """Our verdict in the original server's KernelExecResult shape (runtimes in ms). Numbers come
    from the verdict's JSON form, where a non-finite value is null with a note (types.finite_json);
    the top-level runtimes and speedup keep the original's -1.0 for 'unknown'."""
    d = v.model_dump(mode="json")
    loaded = v.compiled or (v.status not in _NOT_LOADED and v.phase not in ("static", "import"))
    return {
        "compiled": bool(loaded),
        "correctness": v.status is Status.CORRECT,
        "metadata": _metadata(v, d),
        "runtime": _mean_or_unknown(d["runtime"]),
        "runtime_stats": _stats(d["runtime"], v.device),
        "ref_runtime": _mean_or_unknown(d["ref_runtime"]),
        "ref_runtime_stats": _stats(d["ref_runtime"], v.device),
        "speedup": d["speedup"] if d["speedup"] is not None else -1.0,
    }
