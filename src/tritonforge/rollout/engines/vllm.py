"""Client of a vLLM OpenAI-compatible server: completions from token ids, weight reloads.

Covers: one POST /v1/completions per prompt (concurrent, bounded), with `prompt` as a token-id
list, explicit sampling fields (so the server's generation-config defaults never apply),
`logprobs=1`, `return_token_ids` (vLLM >= 0.10: `choices[i].token_ids`) and
`return_tokens_as_token_ids` (older servers: `logprobs.tokens` as "token_id:123"); weight updates
through the dev endpoints (server started with VLLM_SERVER_DEV_MODE=1): POST /pause?mode=...,
POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": DIR}},
POST /reset_prefix_cache, POST /resume (always sent after a pause); GET /health.
Shapes relied on (vllm/entrypoints/openai/completion/protocol.py, vLLM 0.32): request fields
prompt, max_tokens, temperature, top_p, top_k, seed, stop_token_ids, ignore_eos, logprobs,
return_token_ids, return_tokens_as_token_ids; response choices[i].{token_ids, finish_reason,
logprobs.{tokens, token_logprobs}}; /pause takes query `mode` (abort|wait|keep).
Does not cover: text prompts, chat completions, streaming, starting the server.

Logprobs are what the server returns: vLLM's default `--logprobs-mode raw_logprobs` is the raw
model's log_softmax (temperature NOT applied); start the server with
`--logprobs-mode processed_logprobs` to get the temperature-scaled values of the engine contract
when sampling at T != 1 (with top-k/top-p off; see base.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tritonforge.config.engine import VLLMEngineConfig
from tritonforge.logging_setup import get_logger
from tritonforge.rollout.engines.base import SamplingParams
from tritonforge.rollout.engines.http import (
    EndpointClient,
    RetryPolicy,
    call_json,
    post_generation,
    probe,
)
from tritonforge.types import Generation

log = get_logger(__name__)


def parse_completion_choice(choice: dict[str, Any]) -> tuple[list[int], list[float]]:
    """Exact generated token ids and their logprobs from one completions choice.

    Raises ValueError when ids or logprobs are missing or inconsistent (never guesses from text).
    """
    lp = choice.get("logprobs") or {}
    logprobs = lp.get("token_logprobs")
    if logprobs is None:
        raise ValueError("response has no logprobs.token_logprobs")
    ids = choice.get("token_ids")
    if ids is None:
        tokens = lp.get("tokens") or []
        if not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
            raise ValueError("response has neither token_ids nor 'token_id:N' tokens")
        ids = [int(t.split(":", 1)[1]) for t in tokens]
    if len(ids) != len(logprobs):
        raise ValueError(f"{len(ids)} token ids but {len(logprobs)} logprobs")
    if any(v is None for v in logprobs):
        raise ValueError("a generated token has a null logprob")
    return [int(i) for i in ids], [float(v) for v in logprobs]


class VLLMEngine:
    """Engine backed by one vLLM server (see module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        served_model_name: str | None = None,
        request_timeout_s: float = 600.0,
        connect_timeout_s: float = 10.0,
        policy: RetryPolicy | None = None,
        max_concurrency: int = 64,
        pause_mode: str = "wait",
        weight_update_timeout_s: float = 600.0,
    ) -> None:
        self.url = url.rstrip("/")
        self._model = served_model_name
        self._timeout = httpx.Timeout(request_timeout_s, connect=connect_timeout_s)
        self._update_timeout = httpx.Timeout(weight_update_timeout_s, connect=connect_timeout_s)
        self._health_timeout = httpx.Timeout(
            min(10.0, request_timeout_s), connect=connect_timeout_s
        )
        self._policy = policy or RetryPolicy()
        self._http = EndpointClient(connect_timeout_s, max_concurrency)
        self._pause_mode = pause_mode
        self._version = 0

    @classmethod
    def from_config(cls, config: VLLMEngineConfig) -> VLLMEngine:
        return cls(
            config.url,
            served_model_name=config.served_model_name,
            request_timeout_s=config.request_timeout_s,
            connect_timeout_s=config.connect_timeout_s,
            policy=RetryPolicy(config.max_attempts, config.retry_budget_s, config.backoff_s),
            max_concurrency=config.max_concurrency,
            pause_mode=config.pause_mode,
            weight_update_timeout_s=config.weight_update_timeout_s,
        )

    @property
    def policy_version(self) -> int:
        return self._version

    async def _model_name(self) -> str | None:
        if self._model is None:
            res = await call_json(
                self._http.client,
                "GET",
                f"{self.url}/v1/models",
                timeout=self._health_timeout,
                policy=self._policy,
                idempotent=True,
            )
            try:
                self._model = str(res.data["data"][0]["id"]) if res.ok else None
            except (KeyError, IndexError, TypeError):
                self._model = None
        return self._model

    def request_body(
        self, model: str | None, prompt: list[int], params: SamplingParams, index: int
    ) -> dict[str, Any]:
        """The /v1/completions JSON for one prompt (row `index` of a call gets seed + index)."""
        body: dict[str, Any] = {
            "prompt": list(prompt),
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1,
            "stop_token_ids": list(params.stop_token_ids),
            "ignore_eos": params.ignore_eos,
            "logprobs": 1,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            "stream": False,
        }
        if model is not None:
            body["model"] = model
        if params.seed is not None:
            body["seed"] = params.seed + index
        return body

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        model = await self._model_name()
        return list(
            await asyncio.gather(*(self._one(model, p, params, i) for i, p in enumerate(prompts)))
        )

    async def _one(
        self, model: str | None, prompt: list[int], params: SamplingParams, index: int
    ) -> Generation:
        body = self.request_body(model, prompt, params, index)
        url = f"{self.url}/v1/completions"
        return await post_generation(
            self._http, url, body, self._timeout, self._policy, _parse_completion, "vLLM"
        )

    async def _post(
        self, path: str, payload: Any = None, timeout: httpx.Timeout | None = None
    ) -> bool:
        res = await call_json(
            self._http.client,
            "POST",
            f"{self.url}{path}",
            payload,
            timeout=timeout or self._update_timeout,
            policy=self._policy,
            idempotent=path != "/collective_rpc",
        )
        if not res.ok:
            log.warning("vLLM %s failed: %s", path, res.error)
        return res.ok

    async def update_weights(self, path: str, version: int) -> bool:
        """Pause, reload weights from `path`, reset the prefix cache, resume (always)."""
        if not await self._post(f"/pause?mode={self._pause_mode}"):
            return False
        try:
            rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(path)}}
            ok = await self._post("/collective_rpc", rpc) and await self._post(
                "/reset_prefix_cache"
            )
        finally:
            resumed = await self._post("/resume")
        if ok and resumed:
            self._version = version
            log.info(
                "vLLM weights updated", extra={"fields": {"url": self.url, "version": version}}
            )
        return ok and resumed

    async def health(self) -> bool:
        return await probe(self._http, f"{self.url}/health", self._health_timeout)

    async def aclose(self) -> None:
        await self._http.aclose()


def _parse_completion(data: Any) -> tuple[list[int], list[float], str | None]:
    choice = data["choices"][0]
    ids, logprobs = parse_completion_choice(choice)
    return ids, logprobs, choice.get("finish_reason")
