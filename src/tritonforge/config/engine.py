"""Configuration of inference engines: sampling parameters and one config class per engine.

Covers: `SamplingParams` (what one generation asks for); `EngineAbilities` (what an engine can
do, declared on its config class, which the torch-free planner, the device share and the Ray
workers read instead of asking for engine names); one pydantic class per engine, selected by
`type` and registered in `ENGINES` (`hf`: in-process transformers; `vllm`, `sglang`: clients of
one server; `balanced`: several servers of one of those kinds); and `EngineConfig`, the union of
the registered classes that an `[engine]` TOML section is read into (`type` defaults to `hf`).
Torch-free; imports nothing from the rest of the package. Does not cover: the engines
themselves (rollout.engines; a class names its engine in `implementation`).

A new engine is its module under rollout/engines/ (a class with `from_config(config)`) and its
config class here, decorated with `@register_engine`. Keys of another engine are refused with the
engine types that have them (config.describe_errors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import Discriminator, Field, Tag, field_validator

from tritonforge.config import Section
from tritonforge.config.names import unknown_name
from tritonforge.config.registry import Registry

__all__ = [
    "ENGINES",
    "BalancedEngineConfig",
    "EngineAbilities",
    "EngineConfig",
    "EngineConfigBase",
    "HFEngineConfig",
    "HTTPEngineConfig",
    "SGLangEngineConfig",
    "SamplingParams",
    "ServerEngineConfig",
    "VLLMEngineConfig",
    "register_engine",
]

DEFAULT_ENGINE = "hf"
PauseMode = Literal["wait", "abort", "keep"]


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


@dataclass(frozen=True)
class EngineAbilities:
    """What an engine can do. state_dict_weights: takes new weights as an in-memory state dict
    (weight_sync="state_dict"; only an engine in the trainer's process can); servers: a client
    of inference servers at URLs (each rollout worker of a Ray run gets its own share of them);
    device_kinds: the torch device kinds it runs on in the caller's process (its `devices()`);
    pause_modes: the `pause_mode` values it honours."""

    state_dict_weights: bool = False
    servers: bool = False
    device_kinds: tuple[str, ...] = ()
    pause_modes: tuple[str, ...] = ()


class EngineConfigBase(Section):
    """Keys of every engine. A subclass sets `type` (its registry name, a one-value Literal),
    `implementation` ("module:Class" of the engine) and `abilities`."""

    type: str
    model_path: str = Field(
        "runs/tiny-model",
        description="The policy: the checkpoint the hf engine loads (built if it is the missing "
        "tiny model), the tokenizer's folder, the model scale.servers start.",
    )
    seed: int = Field(
        0,
        description="hf: seed of the engine RNG (requests without a seed); Ray: rollout worker "
        "i gets seed + i * scale.rollout.seed_stride.",
    )
    request_timeout_s: float = Field(600.0, gt=0, description="One generate request, end to end.")

    implementation: ClassVar[str] = ""
    abilities: ClassVar[EngineAbilities] = EngineAbilities()

    def devices(self) -> list[str]:
        """The torch devices this engine uses in the caller's process (none for a client)."""
        return []

    def endpoint_urls(self) -> list[str]:
        """The server URLs this engine talks to (none for an in-process engine)."""
        return []

    def endpoint_keys(self) -> dict[str, str | list[str]]:
        """Config key -> the URL (or the non-empty list of URLs) it holds that must be usable."""
        return {}

    def for_endpoints(self, urls: list[str]) -> EngineConfigBase:
        """This engine over only `urls` (a Ray worker's share of the servers)."""
        raise ValueError(f"the {self.type} engine talks to no servers")


ENGINES: Registry[type[EngineConfigBase]] = Registry("engine", unique=True)


def register_engine(cls: type[EngineConfigBase]) -> type[EngineConfigBase]:
    """Class decorator: register an engine config class under its `type`'s one value."""
    name = cls.model_fields["type"].default
    if not isinstance(name, str) or not cls.implementation:
        raise TypeError(f"{cls.__name__} needs a `type` default and an `implementation`")
    ENGINES.register(name, cls)
    return cls


def _carry(src: EngineConfigBase, cls: type[EngineConfigBase], **update: Any) -> Any:
    """An instance of `cls` with the keys it shares with `src` (other than type), then `update`."""
    shared = {k: getattr(src, k) for k in cls.model_fields if k in type(src).model_fields}
    shared.pop("type", None)
    return cls.model_validate({**shared, **update})


# ------------------------------------------------------------------------------- in process
@register_engine
class HFEngineConfig(EngineConfigBase):
    """In-process Hugging Face transformers (rollout.engines.hf): the default for CPU runs."""

    type: Literal["hf"] = "hf"
    device: str = Field("cpu", description="torch device.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="weights dtype."
    )
    max_batch_size: int = Field(16, ge=1, description="rows per forward batch.")
    batch_wait_s: float = Field(0.005, ge=0.0, description="wait to gather concurrent calls.")
    pause_mode: PauseMode = Field(
        "wait",
        description="How a weight update treats generations in flight: wait = between batches "
        "(a batch ends under the weights it began with); keep = between decode steps (a "
        "running batch goes on under the new weights, its KV cache kept; each token's logprob "
        "is the one it was sampled with, the sample keeps the version it began with).",
    )

    implementation: ClassVar[str] = "tritonforge.rollout.engines.hf:HFEngine"
    abilities: ClassVar[EngineAbilities] = EngineAbilities(
        state_dict_weights=True, device_kinds=("cpu", "cuda"), pause_modes=("wait", "keep")
    )

    def devices(self) -> list[str]:
        return [self.device]


# ------------------------------------------------------------------------------- servers
class HTTPEngineConfig(EngineConfigBase):
    """Keys of every client of inference servers."""

    connect_timeout_s: float = Field(10.0, gt=0, description="HTTP connect timeout.")
    max_attempts: int = Field(
        4, ge=1, description="HTTP attempts per request (transient errors only)."
    )
    retry_budget_s: float = Field(
        60.0, ge=0, description="Total time spent waiting between retries."
    )
    backoff_s: float = Field(0.5, ge=0, description="First retry delay (doubles each attempt).")
    max_concurrency: int = Field(64, ge=1, description="In-flight requests per endpoint.")
    weight_update_timeout_s: float = Field(600.0, gt=0, description="Weight reload timeout.")

    abilities: ClassVar[EngineAbilities] = EngineAbilities(servers=True)


class ServerEngineConfig(HTTPEngineConfig):
    """A client of one server at `url` (any registered subclass can sit behind `balanced`)."""

    url: str = Field("http://127.0.0.1:8000", description="Server base URL.")
    urls: list[str] = Field(
        default_factory=list,
        description="Ray: the servers shared out among rollout workers (empty: `url`).",
    )

    def endpoint_urls(self) -> list[str]:
        return list(self.urls) or [self.url]

    def endpoint_keys(self) -> dict[str, str | list[str]]:
        return {"url": self.url}

    def for_endpoints(self, urls: list[str]) -> EngineConfigBase:
        if len(urls) == 1:
            return self.model_copy(update={"url": urls[0]})
        return _carry(self, BalancedEngineConfig, backend=self.type, urls=list(urls))


@register_engine
class VLLMEngineConfig(ServerEngineConfig):
    """A vLLM OpenAI-compatible server (rollout.engines.vllm)."""

    type: Literal["vllm"] = "vllm"
    served_model_name: str | None = Field(
        None, description="The `model` field; None = ask GET /v1/models once."
    )
    pause_mode: PauseMode = Field("wait", description="The /pause mode of a weight update.")

    implementation: ClassVar[str] = "tritonforge.rollout.engines.vllm:VLLMEngine"
    abilities: ClassVar[EngineAbilities] = EngineAbilities(
        servers=True, pause_modes=("wait", "abort", "keep")
    )


@register_engine
class SGLangEngineConfig(ServerEngineConfig):
    """An SGLang server (rollout.engines.sglang)."""

    type: Literal["sglang"] = "sglang"

    implementation: ClassVar[str] = "tritonforge.rollout.engines.sglang:SGLangEngine"


@register_engine
class BalancedEngineConfig(HTTPEngineConfig):
    """Several servers of one kind behind a client-side balancer (rollout.engines.balancer);
    each endpoint is built as engine `backend` with these keys (those it has) and its URL."""

    type: Literal["balanced"] = "balanced"
    urls: list[str] = Field(default_factory=list, description="Endpoint base URLs.")
    backend: str = Field("vllm", description="Server kind behind urls: an engine with a `url`.")
    health_recheck_s: float = Field(5.0, ge=0, description="Retry an unhealthy endpoint after.")
    served_model_name: str | None = Field(
        None, description="vllm backend: the `model` field; None = ask GET /v1/models once."
    )
    pause_mode: PauseMode = Field(
        "wait", description="vllm backend: the /pause mode of a weight update."
    )

    implementation: ClassVar[str] = "tritonforge.rollout.engines.balancer:BalancedEngine"
    abilities: ClassVar[EngineAbilities] = EngineAbilities(
        servers=True, pause_modes=("wait", "abort", "keep")
    )

    @field_validator("backend")
    @classmethod
    def _one_server_engine(cls, value: str) -> str:
        kinds = [n for n in ENGINES.names() if issubclass(ENGINES[n], ServerEngineConfig)]
        if value not in kinds:
            raise ValueError(unknown_name("balanced backend", value, kinds))
        return value

    def endpoint(self, url: str) -> EngineConfigBase:
        """The config of the endpoint at `url`: engine `backend` with the keys it shares."""
        return _carry(self, ENGINES[self.backend], url=url, urls=[])

    def endpoint_urls(self) -> list[str]:
        return list(self.urls)

    def endpoint_keys(self) -> dict[str, str | list[str]]:
        return {"urls": list(self.urls)}

    def for_endpoints(self, urls: list[str]) -> EngineConfigBase:
        return self.model_copy(update={"urls": list(urls)})


def _engine_tag(value: Any) -> str | None:
    """The `type` of an engine section (a TOML table without one is the default engine)."""
    if isinstance(value, dict):
        return str(value.get("type", DEFAULT_ENGINE))
    return getattr(value, "type", None)


# The `[engine]` section: the registered class its `type` names (the classes above; a class
# registered later is not in it). Annotate with this; build one with its class (HFEngineConfig()).
EngineConfig = Annotated[
    Union[tuple(Annotated[cls, Tag(name)] for name, cls in ENGINES.items())],
    Discriminator(_engine_tag),
]
