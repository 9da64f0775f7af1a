"""Configuration of inference engines: sampling parameters and one engine (or a balanced set).

Covers: `SamplingParams` (what one generation asks for) and `EngineConfig` (one TOML section,
`type = "hf" | "vllm" | "sglang" | "balanced"`). Torch-free; imports nothing from the rest of
the package. Does not cover: the engines themselves or their registry (rollout.engines).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tritonforge.config import Section

__all__ = ["ENGINE_TYPES", "EngineConfig", "SamplingParams"]

ENGINE_TYPES = ("hf", "vllm", "sglang", "balanced")


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
        "wait",
        description="How a weight update treats generations in flight. vllm: the /pause mode. "
        "hf: wait = between batches (a batch ends under the weights it began with); keep = "
        "between decode steps (a running batch goes on under the new weights, its KV cache "
        "kept; each token's logprob is the one it was sampled with, the sample keeps the "
        "version it began with); abort is not supported by hf.",
    )
    health_recheck_s: float = Field(
        5.0, ge=0, description="balanced: retry an unhealthy endpoint after."
    )
    weight_update_timeout_s: float = Field(600.0, gt=0, description="HTTP: weight reload timeout.")
