"""Evaluation settings: how a candidate is judged (device, mode, trials, tolerances, budgets).

Covers: the `EvalSettings` section shared by `eval-kernel`, `eval-dir`, `serve-eval` requests
and the rollout config. Does not cover: server settings (see config.server).
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field

from tritonforge.config import Section

DEFAULT_TOLERANCES = {"float64": 1e-7, "float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2}


class Budgets(Section):
    """Wall-clock seconds per phase; exceeding one gives a `timeout` verdict naming the phase."""

    import_s: float = Field(60.0, gt=0, description="import the candidate and build ModelNew")
    compile_s: float = Field(180.0, gt=0, description="first forward call (JIT compile + launch)")
    correctness_s: float = Field(300.0, gt=0, description="all remaining correctness trials")
    timing_s: float = Field(300.0, gt=0, description="warmup + timed trials")


class Limits(Section):
    """Resource limits of the sandboxed child."""

    memory_mb: int = Field(16384, ge=256, description="host RSS (and address space on CPU) cap")
    cpu_seconds: int = Field(900, ge=1, description="RLIMIT_CPU of the child")
    max_processes: int = Field(512, ge=16, description="RLIMIT_NPROC inside the sandbox")
    max_open_files: int = Field(1024, ge=64)
    max_file_mb: int = Field(
        2048, ge=1, description="RLIMIT_FSIZE (caps output memfds too) and scratch tmpfs size"
    )
    output_bytes: int = Field(
        16384, ge=256, description="stdout/stderr kept per stream (head+tail)"
    )


class EvalSettings(Section):
    """How to judge one candidate. Defaults are the strict RL settings."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    device_index: int = Field(0, ge=0, description="which GPU when device is cuda")
    mode: Literal["strict", "hybrid"] = "strict"
    backend: Literal["triton", "cuda"] = Field(
        "triton", description="cuda = CUDA C++ via load_inline (GPU only)"
    )
    correctness_trials: int = Field(5, ge=1, le=50)
    distributions: list[Literal["native", "shifted", "scaled", "positive"]] = Field(
        default_factory=lambda: ["native", "shifted", "scaled"],
        description="input distributions cycled over trials; native = the problem's own get_inputs",
    )
    tolerances: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    nan_policy: Literal["match", "forbid"] = Field(
        "match", description="match: NaN/Inf must sit where the reference has them"
    )
    measure_performance: bool = Field(
        True, description="time on GPU (never on the CPU interpreter)"
    )
    perf_trials: int = Field(50, ge=3, le=1000)
    perf_warmup: int = Field(5, ge=1)
    perf_rounds: int = Field(
        5, ge=1, description="candidate/reference timings interleaved in rounds"
    )
    compile_baseline: bool = Field(False, description="also time torch.compile(reference)")
    min_custom_share: float = Field(
        0.0, ge=0, le=1, description="hybrid: required custom-kernel share"
    )
    max_plausible_speedup: float = Field(
        100.0, gt=1, description="beyond the roofline bound or this: flagged"
    )
    implausible_speedup: Literal["flag", "reject"] = "reject"
    reward: str = Field(
        "tritonforge", description="reward function name (evaluation.rewards.REWARDS)"
    )
    hack_penalty: float = Field(0.0, description="reward of a reward_hack verdict")
    transport: Literal["auto", "memfd"] = Field(
        "auto",
        description="how GPU inputs/outputs cross to the worker: auto = shared device memory "
        "(CUDA VMM, POSIX fds) where the driver allows it, else host memfds; memfd = always memfds",
    )
    sandbox: Literal["auto", "namespaces", "rlimits"] = Field(
        "auto", description="auto: namespaces when the kernel allows them, else rlimits + warning"
    )
    sandbox_allow_root: bool = Field(
        False,
        description="rlimits sandbox: run candidates as root when `nobody` cannot reach the "
        "interpreter (refused otherwise; every verdict then carries a warning)",
    )
    secret_seed: int | None = Field(
        None, description="base of hidden input seeds; None = random per judge"
    )
    reference_cache_mb: int | None = Field(
        None,
        ge=64,
        description="bound of the judge's cache of reference inputs/outputs; None = a quarter "
        "of the host's RAM (at least 4096)",
    )
    budgets: Budgets = Field(default_factory=Budgets)
    limits: Limits = Field(default_factory=Limits)

    def reference_cache_bytes(self) -> int:
        if self.reference_cache_mb is not None:
            return self.reference_cache_mb << 20
        try:
            ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            ram = 0
        return max(4 << 30, ram // 4)

    def tolerance(self, dtype: str) -> float:
        return self.tolerances.get(dtype.replace("torch.", ""), 1e-4)

    def cache_key(self) -> dict:
        """Settings that change a verdict (the secret seed is left out on purpose)."""
        return self.model_dump(
            mode="json", exclude={"secret_seed", "device_index", "reference_cache_mb"}
        )
