"""Client of an SGLang server's native API: /generate from token ids, weight reloads from disk.

Covers: one POST /generate per prompt (concurrent, bounded) with `input_ids`, `sampling_params`
and `return_logprob: true`; exact token ids and logprobs from `meta_info.output_token_logprobs`
(entries [logprob, token_id, text-or-null]); the finish reason from `meta_info.finish_reason`
({"type": "stop"|"length"|"abort", ...}); POST /update_weights_from_disk {"model_path": DIR}
(answers {"success": bool, "message": str, ...}, HTTP 400 on failure); GET /health.

No /flush_cache after a weight update: the scheduler's update_weights_from_disk flushes the radix
cache itself when the load succeeds (its request's `flush_cache` defaults to true), while
POST /flush_cache answers HTTP 400 whenever requests are running or waiting ("the operation will
not be performed"), which under the async schedule is the normal case. A server that rejects
`sampling_seed` (older SGLang) serves unseeded requests; a seeded one fails with an error that
says so. Shapes relied on: SGLang docs "Sampling Parameters" (/generate arguments: input_ids,
sampling_params, return_logprob, logprob_start_len) and the SGLang sources
python/sglang/srt/entrypoints/http_server.py (update_weights_from_disk, flush_cache),
managers/scheduler_update_weights_mixin.py (update_weights_from_disk -> flush_cache),
managers/tokenizer_manager.py (detokenize_logprob_tokens builds (logprob, token_id, text)
triples) and managers/schedule_batch.py (FINISH_* .to_json()).
Does not cover: text prompts, streaming, the tensor/distributed weight-update variants
(/update_weights_from_tensor, /update_weights_from_distributed), starting the server.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tritonforge.config.engine import SGLangEngineConfig
from tritonforge.logging_setup import get_logger
from tritonforge.rollout.engines.base import SamplingParams, failed
from tritonforge.rollout.engines.http import (
    EndpointClient,
    RetryPolicy,
    call_json,
    post_generation,
    probe,
)
from tritonforge.types import Generation, GenStatus

log = get_logger(__name__)


def parse_generate_response(data: dict[str, Any]) -> tuple[list[int], list[float], str | None]:
    """(token ids, logprobs, finish type) of one /generate answer; ValueError if inconsistent."""
    meta = data["meta_info"]
    entries = meta.get("output_token_logprobs")
    if entries is None:
        raise ValueError("response has no meta_info.output_token_logprobs")
    ids = [int(e[1]) for e in entries]
    logprobs = [float(e[0]) for e in entries]
    output_ids = data.get("output_ids")
    if output_ids is not None and [int(i) for i in output_ids] != ids:
        raise ValueError("output_ids disagree with output_token_logprobs")
    finish = meta.get("finish_reason")
    kind = finish.get("type") if isinstance(finish, dict) else finish
    return ids, logprobs, kind


class SGLangEngine:
    """Engine backed by one SGLang server (see module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        request_timeout_s: float = 600.0,
        connect_timeout_s: float = 10.0,
        policy: RetryPolicy | None = None,
        max_concurrency: int = 64,
        weight_update_timeout_s: float = 600.0,
    ) -> None:
        self.url = url.rstrip("/")
        self._timeout = httpx.Timeout(request_timeout_s, connect=connect_timeout_s)
        self._update_timeout = httpx.Timeout(weight_update_timeout_s, connect=connect_timeout_s)
        self._health_timeout = httpx.Timeout(
            min(10.0, request_timeout_s), connect=connect_timeout_s
        )
        self._policy = policy or RetryPolicy()
        self._http = EndpointClient(connect_timeout_s, max_concurrency)
        self._version = 0
        self._seed_rejected = False  # the server answered that it has no `sampling_seed`

    @classmethod
    def from_config(cls, config: SGLangEngineConfig) -> SGLangEngine:
        return cls(
            config.url,
            request_timeout_s=config.request_timeout_s,
            connect_timeout_s=config.connect_timeout_s,
            policy=RetryPolicy(config.max_attempts, config.retry_budget_s, config.backoff_s),
            max_concurrency=config.max_concurrency,
            weight_update_timeout_s=config.weight_update_timeout_s,
        )

    @property
    def policy_version(self) -> int:
        return self._version

    @staticmethod
    def request_body(prompt: list[int], params: SamplingParams, index: int) -> dict[str, Any]:
        """The /generate JSON for one prompt (row `index` of a call gets seed + index)."""
        sampling: dict[str, Any] = {
            "max_new_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1,
            "stop_token_ids": list(params.stop_token_ids),
            "ignore_eos": params.ignore_eos,
            "skip_special_tokens": False,
        }
        if params.seed is not None:
            sampling["sampling_seed"] = params.seed + index
        return {
            "input_ids": list(prompt),
            "sampling_params": sampling,
            "return_logprob": True,
            "logprob_start_len": -1,
            "stream": False,
        }

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        return list(await asyncio.gather(*(self._one(p, params, i) for i, p in enumerate(prompts))))

    def seed_unsupported(self) -> str:
        return (
            f"the SGLang server at {self.url} does not accept sampling_seed (an older SGLang), "
            "but this request is seeded: use a newer SGLang, or unset the seeds "
            "(agent.sampling.seed; evaluate.enabled = false, whose before/after pass is seeded)"
        )

    async def _one(self, prompt: list[int], params: SamplingParams, index: int) -> Generation:
        if params.seed is not None and self._seed_rejected:
            return failed(GenStatus.ERROR, self.seed_unsupported())
        body = self.request_body(prompt, params, index)
        url = f"{self.url}/generate"
        gen = await post_generation(
            self._http, url, body, self._timeout, self._policy, parse_generate_response, "SGLang"
        )
        if params.seed is not None and gen.status is GenStatus.ERROR and _rejects_seed(gen.error):
            if not self._seed_rejected:
                log.error("%s", self.seed_unsupported())
            self._seed_rejected = True
            return failed(GenStatus.ERROR, self.seed_unsupported(), gen.latency_s)
        return gen

    async def update_weights(self, path: str, version: int) -> bool:
        """POST /update_weights_from_disk (which flushes the cache itself); True on success."""
        res = await call_json(
            self._http.client,
            "POST",
            f"{self.url}/update_weights_from_disk",
            {"model_path": str(path)},
            timeout=self._update_timeout,
            policy=self._policy,
        )
        success = res.ok and isinstance(res.data, dict) and bool(res.data.get("success"))
        if not success:
            log.warning("SGLang weight update failed: %s", res.error or res.data)
            return False
        self._version = version
        log.info("SGLang weights updated", extra={"fields": {"url": self.url, "version": version}})
        return True

    async def health(self) -> bool:
        return await probe(self._http, f"{self.url}/health", self._health_timeout)

    async def aclose(self) -> None:
        await self._http.aclose()


def _rejects_seed(error: str | None) -> bool:
    """An HTTP 4xx/5xx answer that names `sampling_seed` (an SGLang without that parameter)."""
    text = (error or "").lower()
    return text.startswith("http 4") or (text.startswith("http 5") and "sampling_seed" in text)
