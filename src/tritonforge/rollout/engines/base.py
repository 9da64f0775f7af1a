"""The inference-engine interface: sampling parameters, the `Engine` protocol, config and registry.

Covers: `SamplingParams`, the async `Engine` protocol every backend implements (token ids in,
token ids + per-token logprobs + finish reason out, weight updates, health), `EngineConfig`
(one TOML section, `type = "hf" | "vllm" | "sglang" | "balanced"`), the `ENGINES` registry and
`build_engine`, and the helpers that map a backend's finish reason to a `GenStatus`.
Does not cover: any backend (see hf.py, vllm.py, sglang.py, balancer.py) and imports no torch.

Logprob contract (all engines): `Generation.logprobs[i]` is the log-probability of
`Generation.token_ids[i]` under the model's temperature-scaled distribution,
log_softmax(logits / T), with T = 1 for greedy decoding (temperature 0). Top-k/top-p truncation
is not folded in. A failed call is a `Generation` with a failure status and no tokens, never text.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Literal, Protocol, runtime_checkable

from pydantic import Field

from tritonforge.config import Section
from tritonforge.types import Generation, GenStatus

__all__ = [
    "ENGINES",
    "Engine",
    "EngineConfig",
    "GenStatus",
    "Generation",
    "SamplingParams",
    "build_engine",
    "failed",
    "status_from_finish_reason",
]


class SamplingParams(Section):
    """How to sample one generation. Engines honour every field or say in their docstring."""

    max_new_tokens: int = Field(512, ge=1, description="Cap on generated tokens.")
    temperature: float = Field(1.0, ge=0.0, description="0 means greedy (argmax).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass; 1 = off.")
    top_k: int = Field(-1, ge=-1, description="Keep the k most likely tokens; -1 or 0 = off.")
    stop_token_ids: list[int] = Field(
        default_factory=list,
        description="Generation ends after emitting one of these (the token is kept in the output).",
    )
    ignore_eos: bool = Field(False, description="Do not stop at the model's EOS tokens.")
    seed: int | None = Field(None, description="Per-request sampling seed; None = engine RNG.")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@runtime_checkable
class Engine(Protocol):
    """An inference engine. Every method returns a status value; none raises on backend failure."""

    @property
    def policy_version(self) -> int:
        """Version of the weights currently served (bumped by update_weights)."""
        ...

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """One Generation per prompt, in order: exact token ids and their logprobs, or a failure."""
        ...

    async def update_weights(self, path: str, version: int) -> bool:
        """Load a saved Hugging Face checkpoint from `path`; on success serve it as `version`."""
        ...

    async def health(self) -> bool:
        """The engine can serve requests now."""
        ...

    async def aclose(self) -> None:
        """Release clients, threads and models. Idempotent."""
        ...


class EngineConfig(Section):
    """One engine (or a balanced set of server endpoints)."""

    type: Literal["hf", "vllm", "sglang", "balanced"] = Field("hf", description="Engine kind.")
    model_path: str = Field(
        "runs/tiny-model",
        description="hf: checkpoint to load (built if it is the missing tiny model).",
    )
    url: str = Field("http://127.0.0.1:8000", description="vllm/sglang: server base URL.")
    urls: list[str] = Field(default_factory=list, description="balanced: endpoint base URLs.")
    backend: Literal["vllm", "sglang"] = Field(
        "vllm", description="balanced: server kind behind urls."
    )
    served_model_name: str | None = Field(
        None, description="vllm: the `model` field; None = ask GET /v1/models once."
    )
    device: str = Field("cpu", description="hf: torch device.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="hf: weights dtype."
    )
    max_batch_size: int = Field(16, ge=1, description="hf: rows per forward batch.")
    batch_wait_s: float = Field(0.005, ge=0.0, description="hf: wait to gather concurrent calls.")
    seed: int = Field(0, description="hf: seed of the engine RNG (requests without a seed).")
    request_timeout_s: float = Field(600.0, gt=0, description="One generate request, end to end.")
    connect_timeout_s: float = Field(10.0, gt=0, description="HTTP connect timeout.")
    max_attempts: int = Field(
        4, ge=1, description="HTTP attempts per request (transient errors only)."
    )
    retry_budget_s: float = Field(
        60.0, ge=0, description="Total time spent waiting between retries."
    )
    backoff_s: float = Field(0.5, ge=0, description="First retry delay (doubles each attempt).")
    max_concurrency: int = Field(64, ge=1, description="HTTP: in-flight requests per endpoint.")
    pause_mode: Literal["wait", "abort", "keep"] = Field(
        "wait", description="vllm: how /pause treats in-flight requests during a weight update."
    )
    health_recheck_s: float = Field(
        5.0, ge=0, description="balanced: retry an unhealthy endpoint after."
    )
    weight_update_timeout_s: float = Field(600.0, gt=0, description="HTTP: weight reload timeout.")


# Registry: engine type -> "module:factory"; factories take an EngineConfig and return an Engine.
# Lazy so that HTTP clients never import torch.
ENGINES: dict[str, str] = {
    "hf": "tritonforge.rollout.engines.hf:HFEngine.from_config",
    "vllm": "tritonforge.rollout.engines.vllm:VLLMEngine.from_config",
    "sglang": "tritonforge.rollout.engines.sglang:SGLangEngine.from_config",
    "balanced": "tritonforge.rollout.engines.balancer:BalancedEngine.from_config",
}


def _resolve(target: str) -> Callable[[EngineConfig], Engine]:
    module_name, _, attr_path = target.partition(":")
    obj: object = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


def build_engine(config: EngineConfig) -> Engine:
    """Construct the engine named by `config.type` (see ENGINES)."""
    if config.type not in ENGINES:
        raise ValueError(f"unknown engine type {config.type!r}; known: {sorted(ENGINES)}")
    return _resolve(ENGINES[config.type])(config)


_FINISH_STATUS = {
    "stop": GenStatus.OK,
    "eos": GenStatus.OK,
    "length": GenStatus.LENGTH,
    "abort": GenStatus.ABORT,
    "cancelled": GenStatus.ABORT,
    "error": GenStatus.ERROR,
    "timeout": GenStatus.TIMEOUT,
}


def status_from_finish_reason(reason: str | None) -> GenStatus:
    """Map a backend finish reason ('stop', 'length', 'abort', ...) to a GenStatus."""
    if reason is None:
        return GenStatus.ERROR
    return _FINISH_STATUS.get(reason, GenStatus.ERROR)


def failed(status: GenStatus, error: str, latency_s: float = 0.0) -> Generation:
    """A failed generation: a status and an error message, no tokens and no text."""
    return Generation(
        status=status, error=error[:2000], finish_reason=status.value, latency_s=latency_s
    )
