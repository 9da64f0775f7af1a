"""Evaluation settings: how a candidate is judged (device, mode, trials, tolerances, budgets).

Covers: the `EvalSettings` section shared by `eval-kernel`, `eval-dir`, `serve-eval` requests
and the rollout config, and the preset registry (`PRESETS`: `strict`, our default;
`kernelbench`, KernelBench's own rules; `tritonforge`, the rules of the original slime-based
TritonForge release), so numbers from the field can be reproduced (docs/presets.md has the
table of differences). Does not cover: server settings (see config.server).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from tritonforge.config import Section, load_config

DEFAULT_TOLERANCES = {"float64": 1e-7, "float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2}


class Budgets(Section):
    """Seconds per phase of the worker's own time (wall time minus its wait for a CPU: a busy
    machine does not spend them; judge/budget.py); exceeding one gives a `timeout` verdict
    naming the phase."""

    import_s: float = Field(60.0, gt=0, description="import the candidate and build ModelNew")
    compile_s: float = Field(180.0, gt=0, description="first forward call (JIT compile + launch)")
    correctness_s: float = Field(300.0, gt=0, description="all remaining correctness trials")
    timing_s: float = Field(300.0, gt=0, description="warmup + timed trials")
    load_stretch: float = Field(
        10.0,
        ge=1.0,
        description="budgets count the worker's own time (not its wait for a CPU on a busy "
        "machine) up to this multiple of the budget in wall time; past it the evaluation is the "
        "evaluator's fault: retried once, then judge_fault. 1 = plain wall-clock budgets. Only "
        "time the worker spent waiting for a CPU stretches a budget: a sleeping or hung "
        "candidate still times out at the budget itself",
    )


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
    """How to judge one candidate. Defaults are the strict RL settings (preset `strict`)."""

    preset: str = Field(
        "strict",
        description="the registered preset these settings started from (PRESETS; recorded with "
        "every verdict); use EvalSettings.from_preset(name) to apply one",
    )
    device: Literal["auto", "cpu", "cuda"] = "auto"
    device_index: int = Field(0, ge=0, description="which GPU when device is cuda")
    mode: Literal["strict", "hybrid"] = "strict"
    backend: Literal["triton", "cuda"] = Field(
        "triton", description="cuda = CUDA C++ via load_inline (GPU only)"
    )
    correctness_trials: int = Field(5, ge=1, le=50)
    distributions: list[Literal["native", "heavy", "shifted", "scaled", "positive"]] = Field(
        default_factory=lambda: ["native", "heavy", "shifted", "heavy", "scaled"],
        min_length=1,
        description="input distributions cycled over trials (a defense: every preset uses the "
        "default); native = the problem's own get_inputs, heavy = heavy-tailed with spikes "
        "scaled to how much each output aggregates (judge/distributions.py; twice in 5 trials: "
        "a subsample escapes one heavy draw in about 2% of draws)",
    )
    tolerances: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    atol_scale: Literal["magnitude", "output_rms", "none"] = Field(
        "magnitude",
        description="a defense (every preset uses magnitude): atol is multiplied by "
        "max(rms(expected), noise), the noise being how far the reference's output moves when "
        "its inputs move by a few ulps; output_rms: by max(1, rms(expected)) (zeros pass on "
        "small outputs, KernelBench #165); none: plain torch.allclose",
    )
    nan_policy: Literal["match", "forbid"] = Field(
        "match", description="match: NaN/Inf must sit where the reference has them"
    )
    require_custom_kernel: bool = Field(
        False,
        description="hybrid mode: a candidate without a custom kernel definition is a reward "
        "hack (no_custom_kernel), as in the original TritonForge release; strict always requires one",
    )
    replay_trials: int = Field(
        2,
        ge=1,
        le=20,
        description="Triton candidates: replays of the recorded kernel launches, alone in a "
        "trusted replayer, on fresh hidden inputs; every one must reproduce the outputs "
        "(positive evidence that the candidate's kernels did the work; the replay is what is "
        "timed). A defense, the same under every preset",
    )
    measure_performance: bool = Field(
        True, description="time on GPU (never on the CPU interpreter)"
    )
    perf_trials: int = Field(50, ge=3, le=1000)
    perf_warmup: int = Field(5, ge=1)
    perf_rounds: int = Field(
        5, ge=1, description="candidate/reference timings interleaved in rounds"
    )
    perf_round_ms: float = Field(
        250.0,
        ge=0,
        description="device time a side's timed calls may take per round: calls longer than "
        "this / (perf_trials / perf_rounds) get fewer trials (at least 2 per round; warmup "
        "likewise stops once it has used this much); 0: always perf_trials",
    )
    compile_baseline: bool = Field(
        False,
        description="also time torch.compile(reference) (compiled once per problem in the "
        "device's timing process; speedup_vs_compile is null without it)",
    )
    timing_clock: Literal["cuda_events", "cuda_events_idle", "host"] = Field(
        "cuda_events",
        description="cuda_events: device time between CUDA events, the call queued behind a "
        "device-side lead so host launch time is hidden, floored by host time less the fixed "
        "sync latency (side-stream work still counts); cuda_events_idle: the same events around "
        "an idle stream (includes the first launch's host latency); host: host time around a "
        "device-wide synchronize",
    )
    bootstrap_samples: int = Field(
        2000, ge=100, le=100000, description="resamples for the speedup's 95% interval"
    )
    time_on_cpu: bool = Field(
        False,
        description="also run the timing path on the CPU interpreter (its numbers say nothing "
        "about GPU speed: for testing the timing schedule only)",
    )
    device_memory_fraction: float = Field(
        0.9,
        gt=0,
        le=1,
        description="per-GPU memory budget for concurrent evaluations (judge caches, timing "
        "process and workers together), as a fraction of the device's memory",
    )
    device_memory_gib: float | None = Field(
        None,
        gt=0,
        description="the per-device budget in GiB (overrides device_memory_fraction; the CPU "
        "has no budget unless this is set)",
    )
    worker_context_mb: int = Field(
        1024,
        ge=0,
        description="device memory a worker costs before its tensors (CUDA context, library "
        "workspaces, caching-allocator slack), counted in each evaluation's admission",
    )
    min_custom_share: float = Field(
        0.0, ge=0, le=1, description="hybrid: required custom-kernel share"
    )
    max_plausible_speedup: float = Field(
        100.0,
        gt=1,
        description="a speedup above this is flagged or rejected (implausible_speedup); a "
        "runtime below the roofline bound is rejected under every preset",
    )
    implausible_speedup: Literal["flag", "reject"] = Field(
        "reject", description="what a speedup above max_plausible_speedup gets"
    )
    transport: Literal["auto", "memfd"] = Field(
        "auto",
        description="how GPU inputs/outputs cross to the worker: auto = shared device memory "
        "(CUDA VMM, POSIX fds) where the driver allows it, else host memfds; memfd = always memfds",
    )
    sandbox: Literal["auto", "namespaces", "rlimits"] = Field(
        "auto", description="auto: namespaces when the kernel allows them, else rlimits + warning"
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

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        """`reward` and `hack_penalty` moved to the task (`task.reward`, `task.hack_penalty`):
        the judge states facts, the task turns them into rewards (rollout/rewards.py)."""
        if isinstance(data, dict):
            moved = sorted({"reward", "hack_penalty"} & set(data))
            if moved:
                raise ValueError(
                    f"{', '.join(moved)} moved from the evaluation settings to the task: set "
                    f"{', '.join('task.' + k for k in moved)} (rewards are computed on the task "
                    "side; changing one no longer re-judges anything)"
                )
        return data

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, name: str) -> str:
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
        return name

    @classmethod
    def from_preset(cls, name: str, **fields: Any) -> EvalSettings:
        """Defaults, then the preset's values, then `fields`."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
        return cls.model_validate({**PRESETS[name].values, "preset": name, **fields})

    def preset_overrides(self) -> list[str]:
        """The judging rules (PRESET_FIELDS) in which these settings differ from their preset."""
        ref = EvalSettings.from_preset(self.preset).model_dump(mode="json")
        mine = self.model_dump(mode="json")
        return [k for k in PRESET_FIELDS if mine.get(k) != ref.get(k)]

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
            mode="json",
            exclude={
                "secret_seed",
                "device_index",
                "reference_cache_mb",
                "device_memory_fraction",
                "device_memory_gib",
                "worker_context_mb",
            },
        )


# --------------------------------------------------------------------------------------------
# Presets
# --------------------------------------------------------------------------------------------


# A preset changes conventions, never a defense. Conventions: how much PyTorch is allowed
# (mode, require_custom_kernel, min_custom_share), tolerances, trial counts, the baseline, the
# speedup threshold that is flagged. (The reward a preset's source used is the task's to choose:
# rollout/rewards.py PRESET_REWARDS.)
CONVENTION_FIELDS = (
    "mode",
    "correctness_trials",
    "tolerances",
    "nan_policy",
    "require_custom_kernel",
    "min_custom_share",
    "perf_trials",
    "perf_round_ms",
    "compile_baseline",
    "max_plausible_speedup",
    "implausible_speedup",
)
# Defenses: the same under every preset (their defaults); settings that change one are named on
# every verdict. (Static, sandbox and runtime rules and the roofline bound have no switch.)
DEFENSE_FIELDS = ("distributions", "atol_scale")
# The settings that make up a preset's rules (what `preset_overrides` compares).
PRESET_FIELDS = CONVENTION_FIELDS + DEFENSE_FIELDS


@dataclass(frozen=True)
class Preset:
    """A named set of judging conventions: EvalSettings values over the defaults, only of
    CONVENTION_FIELDS (a preset that sets a defense is refused when it is made)."""

    description: str
    source: str  # where the rules were read (for docs/presets.md)
    values: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = sorted(set(self.values) - set(CONVENTION_FIELDS))
        if bad:
            raise ValueError(f"a preset sets conventions only; not {bad} (a defense or unknown)")


_LOOSE = {"float64": 1e-2, "float32": 1e-2, "float16": 1e-2, "bfloat16": 1e-2}

PRESETS: dict[str, Preset] = {
    "strict": Preset(
        "TritonForge's own rules: every computation in custom kernels, hidden seeds over "
        "several input distributions, per-dtype tolerances scaled to the output",
        "this repository (EvalSettings defaults)",
    ),
    "kernelbench": Preset(
        "KernelBench's conventions: PyTorch glue allowed (hybrid), atol = rtol = 1e-2, 5 "
        "correctness trials, 100 timed trials, speedup against eager PyTorch, speedups above "
        "10x flagged, not rejected; our defenses (input distributions, magnitude-scaled atol, "
        "roofline, constant outputs, degenerate problems) as under every preset",
        "ScalingIntelligence/KernelBench: scripts/eval_from_generations.py (num_correct_trials "
        "5, num_perf_trials 100), src/eval.py (atol=rtol=1e-02 for v0/v0.1 fp32, "
        "excessive_speedup_threshold 10)",
        {
            "mode": "hybrid",
            "correctness_trials": 5,
            "tolerances": dict(_LOOSE),
            "perf_trials": 100,
            "perf_round_ms": 0.0,  # every trial, however long
            "compile_baseline": False,
            "max_plausible_speedup": 10.0,
            "implausible_speedup": "flag",
        },
    ),
    "tritonforge": Preset(
        "the original slime-based TritonForge release: a @triton.jit kernel required, PyTorch "
        "allowed around it (hybrid), atol = rtol = 1e-2, 5 correctness and 100 timed "
        "trials, reward 0.1 compiled / 0.3 correct + min(max(speedup - 1, 0), 2) with the "
        "speedup against torch.compile (Inductor default); our defenses as under every preset",
        "RLsys-Foundation/TritonForge: SLIME/slime_plugins/rollout_buffer/generator/"
        "kernel_generator.py (validate_submission, payload num_correct_trials 5 / "
        "num_perf_trials 100, reward), kernelbench_config.py (0.1 / 0.3 / 2.3), "
        "KBenchEval/src/eval.py (atol=rtol=1e-02)",
        {
            "mode": "hybrid",
            "correctness_trials": 5,
            "tolerances": dict(_LOOSE),
            "require_custom_kernel": True,
            "perf_trials": 100,
            "perf_round_ms": 0.0,
            "compile_baseline": True,
            "implausible_speedup": "flag",
        },
    ),
}


def load_eval_settings(
    path: str | None = None, overrides: list[str] | None = None, preset: str | None = None
) -> EvalSettings:
    """EvalSettings from a preset (`preset`, else the one the file or overrides name), then the
    TOML file, then the dotted overrides: later sources win."""
    first = load_config(EvalSettings, path, overrides)
    name = preset or first.preset
    if name == first.preset and name == "strict":
        return first
    sets = [*(overrides or []), f'preset="{name}"']
    return load_config(EvalSettings, path, sets, base=EvalSettings.from_preset(name))


def preset_for_server(name: str, server_eval: EvalSettings) -> EvalSettings:
    """A request's preset on a server: the preset's rules with the server's own placement,
    isolation, seeds, budgets and limits kept."""
    keep = server_eval.model_dump(mode="json", exclude=set(PRESET_FIELDS) | {"preset"})
    return EvalSettings.model_validate({**PRESETS[name].values, **keep, "preset": name})
