"""The inference-engine interface: sampling parameters, the `Engine` protocol, config and registry.

Covers: `SamplingParams`, the async `Engine` protocol every backend implements (token ids in,
token ids + per-token logprobs + finish reason out, weight updates, health), `EngineConfig` and
the `ENGINES` registry (config.engine: one config class per engine, selected by `type`, naming
its engine class), `build_engine`, and the helpers that map a backend's finish reason to a
`GenStatus`.
Does not cover: any backend (see hf.py, vllm.py, sglang.py, balancer.py) and imports no torch.

Logprob contract (all engines): `Generation.logprobs[i]` is the log-probability of
`Generation.token_ids[i]` under the model's temperature-scaled distribution,
log_softmax(logits / T), with T = 1 for greedy decoding (temperature 0). Top-k/top-p truncation
is not folded in. A failed call is a `Generation` with a failure status and no tokens, never text.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from tritonforge.config.engine import ENGINES, EngineConfig, SamplingParams
from tritonforge.config.registry import resolve_ref
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


def build_engine(config: EngineConfig) -> Engine:
    """Construct the engine `config` is for: its class's `implementation`, from the config.
    The engine's module is imported here (an HTTP client's never imports torch)."""
    return resolve_ref(type(config).implementation).from_config(config)


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
