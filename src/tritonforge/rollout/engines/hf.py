"""In-process Hugging Face transformers engine: the embedded default for CPU runs and tests.

Covers: batched sampling with a KV cache (left padding + attention mask + explicit position ids,
one prefill then one token per step through `past_key_values`), per-request seeds, stop tokens,
deadlines, and weight updates from a saved checkpoint or an in-memory state dict (a tensor copy
into the served model, on its device). The model runs in a worker thread so the event loop stays
free; concurrent `generate` calls with equal sampling params are gathered into one batch (up to
`max_batch_size` rows, after `batch_wait_s`). `pause_mode` "wait" applies a weight update
between batches; "keep" between decode steps, so an update waits for one step, not for a batch
(the batch goes on under the new weights with its KV cache). `device_hold` (a context manager
factory, e.g. training.device_share.DeviceShare.hold) is held around each decode step and each
weight copy: the device's timing gate keeps them out while a candidate is timed.
Does not cover: tokenization (token ids only), beam search, repetition penalties, multi-device.

Logprobs: for each sampled token, log_softmax(logits / T)[token] in float32 — the log-probability
under the model's temperature-scaled distribution (T = 1 for greedy), computed before top-k/top-p
truncation, i.e. exactly what a trainer recomputes with a teacher-forced forward at temperature T.
A request with `seed` samples row i of its prompts from a generator seeded with seed + i (on the
model's device: the same seed gives other tokens on a GPU than on the CPU).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tritonforge.logging_setup import get_logger
from tritonforge.model_cast import cast_model
from tritonforge.rollout.engines.base import EngineConfig, SamplingParams, failed
from tritonforge.types import Generation, GenStatus

log = get_logger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class _Row:
    """One prompt waiting for (or in) a batch."""

    prompt: list[int]
    params: SamplingParams
    seed: int | None
    deadline: float
    submitted: float
    future: asyncio.Future = field(repr=False)


@dataclass
class _RowState:
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    budget: int = 0
    done: Generation | None = None


def filter_logits(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (to -inf) tokens outside top-k and the top-p nucleus. scaled: [B, V] -> [B, V]."""
    out = scaled
    if top_k > 0 and top_k < out.shape[-1]:
        kth = torch.topk(out, top_k, dim=-1).values[:, -1:]  # [B, 1]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(out, dim=-1, descending=True)  # [B, V]
        probs = torch.softmax(sorted_logits, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs  # mass strictly before each token
        drop_sorted = before > top_p
        drop_sorted[:, 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    return out


def sample_step(
    logits: torch.Tensor, params: SamplingParams, generators: list[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row. logits: [B, V] float32 -> (token ids [B], logprobs [B])."""
    if params.greedy:
        logp_all = torch.log_softmax(logits, dim=-1)  # [B, V]
        tokens = logits.argmax(dim=-1)  # [B]
    else:
        scaled = logits / params.temperature
        logp_all = torch.log_softmax(scaled, dim=-1)
        probs = torch.softmax(filter_logits(scaled, params.top_k, params.top_p), dim=-1)
        tokens = torch.stack(
            [
                torch.multinomial(probs[i], 1, generator=generators[i])[0]
                for i in range(len(generators))
            ]
        )
    return tokens, logp_all.gather(-1, tokens[:, None])[:, 0]


class HFEngine:
    """Engine over an in-memory `transformers` causal LM (see module docstring)."""

    def __init__(
        self,
        model: Any,
        *,
        max_batch_size: int = 16,
        batch_wait_s: float = 0.005,
        seed: int = 0,
        request_timeout_s: float = 600.0,
        eos_token_ids: list[int] | None = None,
        pause_mode: str = "wait",
        device_hold: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> None:
        if pause_mode not in ("wait", "keep"):
            raise ValueError(f"pause_mode {pause_mode!r}: the hf engine takes wait or keep")
        self._model = model.eval()
        self._device = next(model.parameters()).device
        self._max_batch = max_batch_size
        self._batch_wait_s = batch_wait_s
        self._timeout_s = request_timeout_s
        self._pause_mode = pause_mode
        self.device_hold: Callable[[], AbstractContextManager[Any]] = device_hold or nullcontext
        self._rng = torch.Generator(device=self._device).manual_seed(seed)
        gen_cfg = getattr(model, "generation_config", None)
        eos = eos_token_ids if eos_token_ids is not None else getattr(gen_cfg, "eos_token_id", None)
        self._eos: set[int] = set([eos] if isinstance(eos, int) else (eos or []))
        pad = getattr(gen_cfg, "pad_token_id", None)
        self._pad_id = int(pad if pad is not None else (min(self._eos) if self._eos else 0))
        self._max_ctx = int(getattr(model.config, "max_position_embeddings", 1 << 30))
        # transformers >= 5.2x renamed `past_key_values` to `cache` (argument and output field).
        sig = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in sig else "past_key_values"
        # the model: one batch (pause_mode wait) or one decode step (keep), or one weight load
        self._lock = threading.RLock()
        self._pending: list[_Row] = []
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._version = 0
        self._closed = False

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_pretrained(
        cls, path: str | Path, device: str = "cpu", dtype: str = "float32", **kw: Any
    ) -> HFEngine:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(path))
        return cls(cast_model(model, _DTYPES[dtype], device), **kw)

    @classmethod
    def from_config(cls, config: EngineConfig) -> HFEngine:
        from tritonforge.rollout.tiny_model import DEFAULT_TINY_MODEL_DIR, ensure_tiny_model

        path = Path(config.model_path)
        if path == DEFAULT_TINY_MODEL_DIR:
            ensure_tiny_model(path)
        return cls.from_pretrained(
            path,
            device=config.device,
            dtype=config.dtype,
            max_batch_size=config.max_batch_size,
            batch_wait_s=config.batch_wait_s,
            seed=config.seed,
            request_timeout_s=config.request_timeout_s,
            pause_mode=config.pause_mode,
        )

    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def model(self) -> Any:
        return self._model

    # ---------------------------------------------------------------- generation
    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        if self._closed:
            return [failed(GenStatus.ABORT, "engine closed") for _ in prompts]
        loop = asyncio.get_running_loop()
        self._ensure_worker()
        now = time.monotonic()
        rows = [
            _Row(
                prompt=list(p),
                params=params,
                seed=None if params.seed is None else params.seed + i,
                deadline=now + self._timeout_s,
                submitted=now,
                future=loop.create_future(),
            )
            for i, p in enumerate(prompts)
        ]
        self._pending.extend(rows)
        assert self._wakeup is not None
        self._wakeup.set()
        return list(await asyncio.gather(*(r.future for r in rows)))

    def _ensure_worker(self) -> None:
        """Start the batching task on the running loop (again, if an earlier loop was closed)."""
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            self._pending = [r for r in self._pending if r.future.get_loop() is loop]
            self._wakeup = asyncio.Event()
            self._worker = loop.create_task(self._run_worker())

    async def _run_worker(self) -> None:
        assert self._wakeup is not None
        while not self._closed:
            await self._wakeup.wait()
            self._wakeup.clear()
            if self._batch_wait_s:
                await asyncio.sleep(self._batch_wait_s)
            while self._pending and not self._closed:
                batch = self._take_batch()
                try:
                    results = await asyncio.to_thread(self._run_batch, batch)
                except Exception as exc:  # a bug here must not hang callers
                    log.exception("hf batch failed")
                    results = [
                        failed(GenStatus.ERROR, f"{type(exc).__name__}: {exc}") for _ in batch
                    ]
                for row, gen in zip(batch, results):
                    if not row.future.done():
                        row.future.set_result(gen)

    def _take_batch(self) -> list[_Row]:
        """FIFO rows sharing the first row's sampling params (seed aside), up to max_batch_size."""
        key = self._pending[0].params.model_dump_json(exclude={"seed"})
        batch: list[_Row] = []
        rest: list[_Row] = []
        for row in self._pending:
            same = row.params.model_dump_json(exclude={"seed"}) == key
            (batch if same and len(batch) < self._max_batch else rest).append(row)
        self._pending = rest
        return batch

    def _run_batch(self, rows: list[_Row]) -> list[Generation]:
        # wait: the whole batch under the model lock; keep: each step takes it (_step)
        whole = self._lock if self._pause_mode == "wait" else nullcontext()
        with whole, torch.inference_mode():
            try:
                return self._decode(rows)
            except Exception as exc:  # e.g. out of memory: a status, not a crash
                log.warning("hf generation failed: %s", exc)
                return [failed(GenStatus.ERROR, f"{type(exc).__name__}: {exc}") for _ in rows]

    def _decode(self, rows: list[_Row]) -> list[Generation]:
        """Prefill all rows (left-padded), then sample token by token with the KV cache."""
        params = rows[0].params
        states = [
            _RowState(budget=min(params.max_new_tokens, self._max_ctx - len(r.prompt)))
            for r in rows
        ]
        for row, st in zip(rows, states):
            if not row.prompt:
                st.done = failed(GenStatus.ERROR, "empty prompt")
            elif st.budget <= 0:
                st.done = failed(
                    GenStatus.ERROR,
                    f"prompt of {len(row.prompt)} tokens fills the context ({self._max_ctx})",
                )
        live = [i for i, st in enumerate(states) if st.done is None]
        if live:
            self._decode_live([rows[i] for i in live], [states[i] for i in live], params)
        return [st.done or failed(GenStatus.ERROR, "no result") for st in states]

    def _decode_live(
        self, rows: list[_Row], states: list[_RowState], params: SamplingParams
    ) -> None:
        dev = self._device
        lens = [len(r.prompt) for r in rows]
        width = max(lens)
        input_ids = torch.full((len(rows), width), self._pad_id, dtype=torch.long)  # [B, L]
        attn = torch.zeros((len(rows), width), dtype=torch.long)  # [B, L]
        for i, r in enumerate(rows):
            input_ids[i, width - lens[i] :] = torch.tensor(r.prompt, dtype=torch.long)
            attn[i, width - lens[i] :] = 1
        pos = (attn.cumsum(-1) - 1).clamp(min=0)  # [B, L]
        gens = [
            torch.Generator(device=dev).manual_seed(r.seed) if r.seed is not None else self._rng
            for r in rows
        ]
        stops = set(params.stop_token_ids) | (set() if params.ignore_eos else self._eos)
        inputs = {"input_ids": input_ids.to(dev), "attention_mask": attn.to(dev)}
        inputs["position_ids"] = pos.to(dev)
        for _step in range(max(st.budget for st in states)):  # the prefill, then one per token
            out, tokens, token_list, logp_list = self._step(inputs, params, gens)
            self._record(rows, states, token_list, logp_list, stops)
            if all(st.done is not None for st in states):
                return
            mask = inputs["attention_mask"]
            inputs = {
                "input_ids": tokens[:, None],  # [B, 1]
                "attention_mask": torch.cat([mask, mask.new_ones((len(rows), 1))], dim=-1),
                "position_ids": inputs["position_ids"][:, -1:] + 1,  # [B, 1]
                self._cache_kw: getattr(out, self._cache_kw),
            }

    def _step(
        self, inputs: dict[str, Any], params: SamplingParams, gens: list[torch.Generator]
    ) -> tuple[Any, torch.Tensor, list[int], list[float]]:
        """One forward and one sampled token per row (on the device, and as host lists), under
        the model lock and the device hold; the host copies wait for the device, so the hold
        ends when the step's work is done."""
        with self._lock, self.device_hold():
            out = self._model(**inputs, use_cache=True, logits_to_keep=1)
            tokens, logps = sample_step(out.logits[:, -1, :].float(), params, gens)  # [B], [B]
            return out, tokens, tokens.tolist(), logps.tolist()

    def _record(
        self,
        rows: list[_Row],
        states: list[_RowState],
        tokens: list[int],
        logps: list[float],
        stops: set[int],
    ) -> None:
        now = time.monotonic()
        for row, st, tok, lp in zip(rows, states, tokens, logps):
            if st.done is not None:
                continue
            latency = now - row.submitted
            if self._closed:
                st.done = failed(GenStatus.ABORT, "engine closed", latency)
                continue
            if now > row.deadline:
                st.done = failed(
                    GenStatus.TIMEOUT, f"generation exceeded {self._timeout_s:.0f}s", latency
                )
                continue
            st.tokens.append(tok)
            st.logprobs.append(lp)
            reason = "stop" if tok in stops else ("length" if len(st.tokens) >= st.budget else None)
            if reason is not None:
                st.done = Generation(
                    status=GenStatus.OK if reason == "stop" else GenStatus.LENGTH,
                    token_ids=st.tokens,
                    logprobs=st.logprobs,
                    finish_reason=reason,
                    latency_s=latency,
                )

    # ---------------------------------------------------------------- weights
    async def update_weights(self, path: str, version: int) -> bool:
        """Load the safetensors (or .bin) weights saved in `path`; on success serve `version`."""
        return await asyncio.to_thread(self._load_from_path, path, version)

    async def load_state_dict(self, state_dict: dict[str, torch.Tensor], version: int) -> bool:
        """Copy an in-memory state dict (same names and shapes) into the model."""
        return await asyncio.to_thread(self._apply_state_dict, state_dict, version)

    def _load_from_path(self, path: str, version: int) -> bool:
        try:
            state_dict = read_checkpoint(Path(path))
        except Exception as exc:
            log.warning("cannot read weights from %s: %s", path, exc)
            return False
        return self._apply_state_dict(state_dict, version)

    def _apply_state_dict(self, state_dict: dict[str, torch.Tensor], version: int) -> bool:
        with self._lock, self.device_hold(), torch.no_grad():
            problem = check_state_dict(self._model, state_dict)
            if problem:
                log.warning("weight update rejected: %s", problem)
                return False
            self._model.load_state_dict(state_dict, strict=False)
            self._version = version
        log.info(
            "weights updated", extra={"fields": {"version": version, "tensors": len(state_dict)}}
        )
        return True

    # ---------------------------------------------------------------- lifecycle
    async def health(self) -> bool:
        return not self._closed

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        for row in self._pending:
            if not row.future.done():
                row.future.set_result(failed(GenStatus.ABORT, "engine closed"))
        self._pending = []
        if self._wakeup is not None:
            self._wakeup.set()
        if self._worker is not None and self._worker.get_loop() is asyncio.get_running_loop():
            try:
                await asyncio.wait_for(self._worker, timeout=30)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self._worker.cancel()


def read_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a saved HF checkpoint directory (safetensors shards, else pytorch_model*.bin)."""
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors"))
    if files:
        out: dict[str, torch.Tensor] = {}
        for f in files:
            out.update(load_file(str(f)))
        return out
    bins = sorted(path.glob("pytorch_model*.bin"))
    if not bins:
        raise FileNotFoundError(f"no *.safetensors or pytorch_model*.bin in {path}")
    out = {}
    for f in bins:
        out.update(torch.load(f, map_location="cpu", weights_only=True))
    return out


def check_state_dict(model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> str | None:
    """Why `state_dict` cannot replace the model's weights, or None (tied aliases may be absent)."""
    own = model.state_dict()
    unexpected = sorted(set(state_dict) - set(own))
    if unexpected:
        return f"unexpected tensors {unexpected[:5]}"
    for name, tensor in state_dict.items():
        if tuple(tensor.shape) != tuple(own[name].shape):
            return f"{name}: shape {tuple(tensor.shape)} != {tuple(own[name].shape)}"
    aliases: dict[int, set[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(param), set()).add(name)
    params = dict(model.named_parameters(remove_duplicate=False))
    missing = [
        n
        for n in params
        if n not in state_dict and not (aliases[id(params[n])] & state_dict.keys())
    ]
    if missing:
        return f"missing tensors {missing[:5]}"
    return None
