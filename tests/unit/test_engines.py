"""Engines: the in-process HF engine on the tiny model, the vLLM/SGLang HTTP clients against fake
servers on loopback (shapes as documented in vllm.py/sglang.py), the balancer, and the tiny model.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from helpers.live_server import free_port, serve
from tritonforge.rollout.engines.balancer import BalancedEngine
from tritonforge.rollout.engines.base import EngineConfig, SamplingParams, build_engine
from tritonforge.rollout.engines.hf import HFEngine, filter_logits
from tritonforge.rollout.engines.http import RetryPolicy
from tritonforge.rollout.engines.sglang import SGLangEngine
from tritonforge.rollout.engines.vllm import VLLMEngine
from tritonforge.rollout.tiny_model import (
    CHAT_TEMPLATE,
    TinyModelSpec,
    ensure_tiny_model,
    make_tiny_model,
)
from tritonforge.types import Generation, GenStatus

FAST_RETRY = RetryPolicy(max_attempts=4, budget_s=5.0, backoff_s=0.01)
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17, 18]]


# ------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def engine(tiny_dir: Path) -> Iterator[HFEngine]:
    eng = HFEngine.from_pretrained(tiny_dir, max_batch_size=8, batch_wait_s=0.0)
    yield eng
    asyncio.run(eng.aclose())


def teacher_forced_logprobs(
    model: Any, prompt: list[int], tokens: list[int], temperature: float = 1.0
) -> torch.Tensor:
    """log_softmax(logits / T) of `tokens` after `prompt`, from one full-sequence forward."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()  # [L, V]
    logp = torch.log_softmax(logits / temperature, dim=-1)[len(prompt) - 1 : -1]  # [T, V]
    return logp.gather(-1, torch.tensor(tokens)[:, None])[:, 0]


# ------------------------------------------------------------------------------------ tiny model
def test_tiny_model_tokenizer_and_template(tiny_dir: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    cfg = AutoConfig.from_pretrained(tiny_dir)
    assert cfg.vocab_size == len(tok) and cfg.max_position_embeddings == 8192
    for special in ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>"]:
        assert len(tok.encode(special)) == 1, special
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert (
        text
        == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.chat_template == CHAT_TEMPLATE
    # <think> survives decoding with skip_special_tokens; control tokens do not.
    ids = tok.encode("<think>x</think><|im_end|>")
    assert tok.decode(ids, skip_special_tokens=True) == "<think>x</think>"


def test_tiny_model_is_deterministic_in_seed(tmp_path: Path) -> None:
    spec = TinyModelSpec(vocab_size=1024, hidden=32, layers=1, heads=2, kv_heads=1)
    a = make_tiny_model(tmp_path / "a", spec)
    b = make_tiny_model(tmp_path / "b", spec)
    c = make_tiny_model(tmp_path / "c", spec.model_copy(update={"seed": 1}))
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()


def test_tiny_moe_generates(tmp_path: Path) -> None:
    spec = TinyModelSpec(vocab_size=1024, hidden=32, layers=1, heads=2, kv_heads=1, moe=True)
    eng = HFEngine.from_pretrained(make_tiny_model(tmp_path / "moe", spec), batch_wait_s=0.0)
    assert type(eng.model).__name__ == "Qwen3MoeForCausalLM"
    gens = asyncio.run(
        eng.generate([[5, 6, 7]], SamplingParams(max_new_tokens=4, ignore_eos=True, seed=0))
    )
    assert gens[0].status is GenStatus.LENGTH and len(gens[0].token_ids) == 4


# ------------------------------------------------------------------------------------ HF engine
def test_filter_logits_hand_computed() -> None:
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    kept = torch.isfinite(filter_logits(logits, top_k=2, top_p=1.0))[0].tolist()
    assert kept == [False, False, True, True]
    # softmax([0,1,2,3]) = [0.032, 0.087, 0.237, 0.644]: mass before token 2 is 0.644 <= 0.7 -> kept,
    # mass before token 1 is 0.881 > 0.7 -> dropped.
    kept = torch.isfinite(filter_logits(logits, top_k=-1, top_p=0.7))[0].tolist()
    assert kept == [False, False, True, True]
    kept = torch.isfinite(filter_logits(logits, top_k=-1, top_p=0.5))[0].tolist()
    assert kept == [False, False, False, True]


def test_hf_batched_lengths_and_exact_logprobs(engine: HFEngine) -> None:
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=7, ignore_eos=True)
    gens = asyncio.run(engine.generate(PROMPTS, params))
    assert len(gens) == 3
    for prompt, gen in zip(PROMPTS, gens):
        assert gen.status is GenStatus.LENGTH and gen.finish_reason == "length"
        assert len(gen.token_ids) == 12 and len(gen.logprobs) == 12
        ref = teacher_forced_logprobs(engine.model, prompt, gen.token_ids)
        assert torch.allclose(torch.tensor(gen.logprobs), ref, atol=1e-4, rtol=0)


def test_hf_logprobs_are_temperature_scaled(engine: HFEngine) -> None:
    params = SamplingParams(max_new_tokens=6, temperature=0.7, seed=3, ignore_eos=True)
    gen = asyncio.run(engine.generate([PROMPTS[0]], params))[0]
    ref = teacher_forced_logprobs(engine.model, PROMPTS[0], gen.token_ids, temperature=0.7)
    assert torch.allclose(torch.tensor(gen.logprobs), ref, atol=1e-4, rtol=0)


def test_hf_greedy_is_deterministic_argmax(engine: HFEngine) -> None:
    params = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)
    a = asyncio.run(engine.generate(PROMPTS, params))
    b = asyncio.run(engine.generate(PROMPTS[::-1], params))[::-1]
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    prompt, toks = PROMPTS[1], a[1].token_ids
    with torch.no_grad():
        logits = engine.model(input_ids=torch.tensor([prompt + toks])).logits[0]
    assert logits[len(prompt) - 1 : -1].argmax(-1).tolist() == toks
    # top_k=1 sampling is greedy too
    k1 = asyncio.run(
        engine.generate(
            [prompt], SamplingParams(max_new_tokens=8, top_k=1, seed=0, ignore_eos=True)
        )
    )
    assert k1[0].token_ids == toks


def test_hf_seeds(engine: HFEngine) -> None:
    p = SamplingParams(max_new_tokens=10, seed=11, ignore_eos=True)
    a = asyncio.run(engine.generate([PROMPTS[0], PROMPTS[0]], p))
    b = asyncio.run(engine.generate([PROMPTS[0], PROMPTS[0]], p))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert a[0].token_ids != a[1].token_ids  # row i samples with seed + i


def test_hf_stop_token_vs_length(engine: HFEngine) -> None:
    greedy = asyncio.run(
        engine.generate(
            [PROMPTS[2]], SamplingParams(max_new_tokens=10, temperature=0.0, ignore_eos=True)
        )
    )[0]
    stop = greedy.token_ids[3]
    k = greedy.token_ids.index(stop)
    gen = asyncio.run(
        engine.generate(
            [PROMPTS[2]], SamplingParams(max_new_tokens=10, temperature=0.0, stop_token_ids=[stop])
        )
    )[0]
    assert gen.status is GenStatus.OK and gen.finish_reason == "stop"
    assert gen.token_ids == greedy.token_ids[: k + 1] and gen.token_ids[-1] == stop


def test_hf_concurrent_calls_share_batches(engine: HFEngine) -> None:
    params = SamplingParams(max_new_tokens=5, temperature=0.0, ignore_eos=True)

    async def both() -> list[list[Generation]]:
        return await asyncio.gather(*(engine.generate([p], params) for p in PROMPTS))

    together = [r[0].token_ids for r in asyncio.run(both())]
    alone = [asyncio.run(engine.generate([p], params))[0].token_ids for p in PROMPTS]
    assert together == alone


def test_hf_failures_are_statuses(tiny_dir: Path) -> None:
    eng = HFEngine.from_pretrained(tiny_dir, batch_wait_s=0.0, request_timeout_s=0.0)
    gens = asyncio.run(eng.generate([[5, 6]], SamplingParams(max_new_tokens=3)))
    assert (
        gens[0].status is GenStatus.TIMEOUT and gens[0].token_ids == [] and gens[0].logprobs == []
    )
    eng = HFEngine.from_pretrained(tiny_dir, batch_wait_s=0.0)
    too_long = [1] * 8192
    gens = asyncio.run(
        eng.generate([too_long, [], [5]], SamplingParams(max_new_tokens=2, ignore_eos=True))
    )
    assert [g.status for g in gens] == [GenStatus.ERROR, GenStatus.ERROR, GenStatus.LENGTH]
    asyncio.run(eng.aclose())
    assert asyncio.run(eng.generate([[5]], SamplingParams()))[0].status is GenStatus.ABORT
    assert asyncio.run(eng.health()) is False


def test_hf_update_weights(tiny_dir: Path, tmp_path: Path) -> None:
    eng = HFEngine.from_pretrained(tiny_dir, batch_wait_s=0.0)
    greedy = SamplingParams(max_new_tokens=10, temperature=0.0, ignore_eos=True)
    before = asyncio.run(eng.generate([PROMPTS[0]], greedy))[0].token_ids
    from transformers import AutoModelForCausalLM

    other = AutoModelForCausalLM.from_pretrained(tiny_dir)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    other.save_pretrained(tmp_path / "perturbed")
    assert asyncio.run(eng.update_weights(str(tmp_path / "perturbed"), 1)) is True
    assert eng.policy_version == 1
    after = asyncio.run(eng.generate([PROMPTS[0]], greedy))[0]
    assert after.token_ids != before
    ref = teacher_forced_logprobs(other, PROMPTS[0], after.token_ids)
    assert torch.allclose(torch.tensor(after.logprobs), ref, atol=1e-4, rtol=0)
    # failures leave weights and version alone
    assert asyncio.run(eng.update_weights(str(tmp_path / "missing"), 2)) is False
    bad = {"model.embed_tokens.weight": torch.zeros(3, 3)}
    assert asyncio.run(eng.load_state_dict(bad, 2)) is False
    assert eng.policy_version == 1
    # in-memory state dict back to the original weights
    orig = AutoModelForCausalLM.from_pretrained(tiny_dir).state_dict()
    assert asyncio.run(eng.load_state_dict(orig, 2)) is True and eng.policy_version == 2
    assert asyncio.run(eng.generate([PROMPTS[0]], greedy))[0].token_ids == before


@pytest.mark.parametrize("mode", ["wait", "keep"])
def test_hf_pause_mode_decides_whether_a_weight_copy_waits_for_the_batch(
    tiny_dir: Path, mode: str
) -> None:
    """wait: a weight copy waits until the running batch ends; keep: it goes in between two
    decode steps (the batch then goes on under the new weights), holding the device share."""
    held: list[str] = []

    @contextlib.contextmanager
    def hold() -> Iterator[None]:
        held.append("in")
        yield

    eng = HFEngine.from_pretrained(tiny_dir, batch_wait_s=0.0, pause_mode=mode, device_hold=hold)
    params = SamplingParams(max_new_tokens=400, temperature=1.0, ignore_eos=True, seed=3)
    state = {k: v + 0.01 for k, v in eng.model.state_dict().items()}

    async def run() -> tuple[Generation, int]:
        task = asyncio.create_task(eng.generate([PROMPTS[0]], params))
        while eng._pending or not held:  # the batch has begun decoding
            await asyncio.sleep(0.001)
        assert await eng.load_state_dict(state, 1)
        holds_before_copied = len(held)  # decode steps so far, and the copy's own hold
        return (await task)[0], holds_before_copied

    out, holds = asyncio.run(run())
    asyncio.run(eng.aclose())
    assert out.status is GenStatus.LENGTH and len(out.token_ids) == 400
    if mode == "wait":  # after every decode step of the batch
        assert holds == 401
    else:  # a step or so after the batch began
        assert holds < 200
    assert eng.policy_version == 1 and len(held) == 401
    for k, v in eng.model.state_dict().items():
        assert torch.equal(v, state[k])


def test_build_engine_registry(tiny_dir: Path) -> None:
    eng = build_engine(EngineConfig(type="hf", model_path=str(tiny_dir)))
    assert isinstance(eng, HFEngine)
    assert isinstance(build_engine(EngineConfig(type="vllm")), VLLMEngine)
    assert isinstance(build_engine(EngineConfig(type="sglang")), SGLangEngine)
    bal = build_engine(
        EngineConfig(
            type="balanced", backend="sglang", urls=["http://127.0.0.1:1", "http://127.0.0.1:2"]
        )
    )
    assert isinstance(bal, BalancedEngine) and bal.outstanding == [0, 0]


# ------------------------------------------------------------------------------------ fake servers
class FakeState:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.fail_with: list[int] = []  # status codes to answer first, in order
        self.delay_s = 0.0
        self.finish = "length"
        self.rpc_fails = False
        self.in_flight = 0  # SGLang: requests running or waiting (flush_cache refuses then)
        self.no_seed = False  # SGLang: an older server without `sampling_seed`


def fake_vllm(state: FakeState, old_format: bool = False) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "tiny", "object": "model"}]}

    @app.post("/v1/completions")
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        state.calls.append(("completions", body))
        if state.fail_with:
            code = state.fail_with.pop(0)
            headers = {"Retry-After": "0"} if code == 429 else {}
            return JSONResponse(
                {"error": {"message": "nope", "code": code}}, status_code=code, headers=headers
            )
        await asyncio.sleep(state.delay_s)
        n = body["max_tokens"]
        ids = [(body["prompt"][-1] + k + 1) % 1000 for k in range(n)]
        lps = [-0.5 * (k + 1) for k in range(n)]
        choice: dict[str, Any] = {
            "index": 0,
            "text": "whatever the detokenizer said",
            "finish_reason": state.finish,
            "logprobs": {
                "text_offset": [0] * n,
                "token_logprobs": lps,
                "tokens": [f"token_id:{i}" for i in ids],
                "top_logprobs": [],
            },
        }
        if not old_format:
            choice["token_ids"] = ids
        return JSONResponse(
            {"id": "cmpl-1", "object": "text_completion", "model": "tiny", "choices": [choice]}
        )

    for path in ["/pause", "/reset_prefix_cache", "/resume"]:

        async def control(request: Request, _path: str = path) -> dict:
            state.calls.append((_path, dict(request.query_params)))
            return {"status": "ok"}

        app.post(path)(control)

    @app.post("/collective_rpc")
    async def rpc(request: Request) -> JSONResponse:
        state.calls.append(("/collective_rpc", await request.json()))
        if state.rpc_fails:
            return JSONResponse({"error": {"message": "reload failed"}}, status_code=500)
        return JSONResponse({"results": [None]})

    @app.get("/health")
    async def health() -> dict:
        return {}

    return app


def fake_sglang(state: FakeState) -> FastAPI:
    app = FastAPI()

    @app.post("/generate")
    async def generate(request: Request) -> JSONResponse:
        body = await request.json()
        state.calls.append(("generate", body))
        if state.fail_with:
            return JSONResponse({"error": "busy"}, status_code=state.fail_with.pop(0))
        if state.no_seed and "sampling_seed" in body["sampling_params"]:
            why = "SamplingParams.__init__() got an unexpected keyword argument 'sampling_seed'"
            return JSONResponse({"object": "error", "message": why}, status_code=400)
        n = body["sampling_params"]["max_new_tokens"]
        ids = [body["input_ids"][-1] + k + 1 for k in range(n)]
        finish = (
            {"type": "length", "length": n}
            if state.finish == "length"
            else {"type": state.finish, "matched": ids[-1]}
        )
        meta = {
            "id": "r1",
            "finish_reason": finish,
            "prompt_tokens": len(body["input_ids"]),
            "completion_tokens": n,
            "output_token_logprobs": [[-0.25 * (k + 1), t, None] for k, t in enumerate(ids)],
        }
        return JSONResponse({"text": "ignored", "output_ids": ids, "meta_info": meta})

    # As SGLang's http_server.py documents them: the update flushes the radix cache itself when
    # the load succeeds; /flush_cache answers 400 while requests are running or waiting.
    @app.post("/update_weights_from_disk")
    async def update(request: Request) -> JSONResponse:
        body = await request.json()
        state.calls.append(("update", body))
        ok = not state.rpc_fails
        return JSONResponse(
            {"success": ok, "message": "ok" if ok else "bad path", "num_paused_requests": 0},
            status_code=200 if ok else 400,
        )

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush() -> Response:
        state.calls.append(("flush", None))
        text = (
            "Cache flushed.\nPlease check backend logs for more details. (When there are "
            "running or waiting requests, the operation will not be performed.)\n"
        )
        return Response(text, status_code=400 if state.in_flight else 200)

    @app.get("/health")
    async def health() -> dict:
        return {}

    return app


# ------------------------------------------------------------------------------------ vLLM client
def test_vllm_request_shape_and_parsing() -> None:
    state = FakeState()
    with serve(fake_vllm(state)) as url:
        eng = VLLMEngine(url, policy=FAST_RETRY)
        params = SamplingParams(
            max_new_tokens=3, temperature=0.5, top_p=0.9, seed=4, stop_token_ids=[2]
        )
        gens = asyncio.run(eng.generate([[1, 2, 10], [20]], params))
        asyncio.run(eng.aclose())
    assert [g.token_ids for g in gens] == [[11, 12, 13], [21, 22, 23]]
    assert gens[0].logprobs == [-0.5, -1.0, -1.5] and gens[0].status is GenStatus.LENGTH
    bodies = sorted((b for k, b in state.calls if k == "completions"), key=lambda b: b["seed"])
    assert bodies[0]["prompt"] == [1, 2, 10] and bodies[0]["model"] == "tiny"
    assert (
        bodies[0]["max_tokens"] == 3
        and bodies[0]["temperature"] == 0.5
        and bodies[0]["top_p"] == 0.9
    )
    assert (
        bodies[0]["top_k"] == -1
        and bodies[0]["stop_token_ids"] == [2]
        and bodies[0]["logprobs"] == 1
    )
    assert bodies[0]["return_token_ids"] is True and bodies[0]["return_tokens_as_token_ids"] is True
    assert [b["seed"] for b in bodies] == [4, 5]


def test_vllm_old_format_token_id_strings_and_abort() -> None:
    state = FakeState()
    with serve(fake_vllm(state, old_format=True)) as url:
        eng = VLLMEngine(url, served_model_name="m", policy=FAST_RETRY)
        gen = asyncio.run(eng.generate([[7]], SamplingParams(max_new_tokens=2)))[0]
        state.finish = "abort"
        aborted = asyncio.run(eng.generate([[7]], SamplingParams(max_new_tokens=2)))[0]
        asyncio.run(eng.aclose())
    assert gen.token_ids == [8, 9] and gen.logprobs == [-0.5, -1.0]
    assert aborted.status is GenStatus.ABORT and aborted.token_ids == [] and aborted.logprobs == []


def test_vllm_retries_503_then_succeeds_and_not_400() -> None:
    state = FakeState()
    with serve(fake_vllm(state)) as url:
        eng = VLLMEngine(url, served_model_name="m", policy=FAST_RETRY)
        state.fail_with = [503, 503, 429]
        ok = asyncio.run(eng.generate([[1]], SamplingParams(max_new_tokens=2)))[0]
        n_ok = len(state.calls)
        state.fail_with = [400]
        bad = asyncio.run(eng.generate([[1]], SamplingParams(max_new_tokens=2)))[0]
        n_bad = len(state.calls) - n_ok
        state.fail_with = [503] * 10
        gave_up = asyncio.run(eng.generate([[1]], SamplingParams(max_new_tokens=2)))[0]
        asyncio.run(eng.aclose())
    assert ok.status is GenStatus.LENGTH and ok.token_ids == [2, 3] and n_ok == 4
    assert (
        bad.status is GenStatus.ERROR
        and n_bad == 1
        and "400" in (bad.error or "")
        and bad.token_ids == []
    )
    assert gave_up.status is GenStatus.ERROR and "4 attempt" in (gave_up.error or "")


def test_vllm_timeout_is_status() -> None:
    state = FakeState()
    state.delay_s = 2.0
    with serve(fake_vllm(state)) as url:
        eng = VLLMEngine(url, served_model_name="m", request_timeout_s=0.3, policy=FAST_RETRY)
        gen = asyncio.run(eng.generate([[1]], SamplingParams(max_new_tokens=2)))[0]
        asyncio.run(eng.aclose())
    assert gen.status is GenStatus.TIMEOUT and gen.token_ids == [] and gen.logprobs == []
    assert (
        len([c for c in state.calls if c[0] == "completions"]) == 1
    )  # a read timeout is not resent


def test_vllm_weight_update_dance() -> None:
    state = FakeState()
    with serve(fake_vllm(state)) as url:
        eng = VLLMEngine(url, served_model_name="m", policy=FAST_RETRY)
        assert asyncio.run(eng.update_weights("/ckpt/v1", 1)) is True
        assert [c[0] for c in state.calls] == [
            "/pause",
            "/collective_rpc",
            "/reset_prefix_cache",
            "/resume",
        ]
        assert state.calls[0][1] == {"mode": "wait"}
        assert state.calls[1][1] == {
            "method": "reload_weights",
            "kwargs": {"weights_path": "/ckpt/v1"},
        }
        state.calls.clear()
        state.rpc_fails = True
        assert asyncio.run(eng.update_weights("/ckpt/v2", 2)) is False
        assert [c[0] for c in state.calls] == [
            "/pause",
            "/collective_rpc",
            "/resume",
        ]  # always resumed
        assert eng.policy_version == 1
        assert asyncio.run(eng.health()) is True
        asyncio.run(eng.aclose())


def test_unreachable_server_is_error_not_exception() -> None:
    eng = VLLMEngine(f"http://127.0.0.1:{free_port()}", served_model_name="m", policy=FAST_RETRY)
    gen = asyncio.run(eng.generate([[1]], SamplingParams(max_new_tokens=2)))[0]
    assert gen.status is GenStatus.ERROR and "ConnectError" in (gen.error or "")
    assert asyncio.run(eng.health()) is False
    assert asyncio.run(eng.update_weights("/x", 1)) is False
    asyncio.run(eng.aclose())


# ------------------------------------------------------------------------------------ SGLang client
def test_sglang_request_shape_parsing_and_weights() -> None:
    state = FakeState()
    with serve(fake_sglang(state)) as url:
        eng = SGLangEngine(url, policy=FAST_RETRY)
        state.fail_with = [503]
        params = SamplingParams(max_new_tokens=3, temperature=0.0, top_k=5, seed=9)
        gen = asyncio.run(eng.generate([[3, 4]], params))[0]
        body = state.calls[-1][1]
        state.finish = "stop"
        stopped = asyncio.run(eng.generate([[3, 4]], params))[0]
        state.finish = "abort"
        aborted = asyncio.run(eng.generate([[3, 4]], params))[0]
        state.calls.clear()
        state.in_flight = 3  # the async schedule: generation continues during the push
        assert asyncio.run(eng.update_weights("/ckpt/v3", 3)) is True
        assert state.calls == [("update", {"model_path": "/ckpt/v3"})]  # no /flush_cache
        assert eng.policy_version == 3
        state.rpc_fails = True
        assert asyncio.run(eng.update_weights("/ckpt/v4", 4)) is False
        assert eng.policy_version == 3
        asyncio.run(eng.aclose())
    assert (
        gen.status is GenStatus.LENGTH
        and gen.token_ids == [5, 6, 7]
        and gen.logprobs == [-0.25, -0.5, -0.75]
    )
    assert body["input_ids"] == [3, 4] and body["return_logprob"] is True
    sp = body["sampling_params"]
    assert (
        sp["max_new_tokens"] == 3
        and sp["temperature"] == 0.0
        and sp["top_k"] == 5
        and sp["sampling_seed"] == 9
    )
    assert stopped.status is GenStatus.OK and stopped.finish_reason == "stop"
    assert aborted.status is GenStatus.ABORT and aborted.token_ids == []


def test_sglang_flush_cache_refuses_while_requests_wait_which_is_why_the_client_skips_it() -> None:
    """The documented behaviour the client relies on: /flush_cache is a 400 under load."""
    state = FakeState()
    with serve(fake_sglang(state)) as url:
        state.in_flight = 1
        busy = httpx.post(f"{url}/flush_cache", timeout=10)
        state.in_flight = 0
        idle = httpx.post(f"{url}/flush_cache", timeout=10)
    assert busy.status_code == 400 and "will not be performed" in busy.text
    assert idle.status_code == 200


def test_sglang_without_sampling_seed_serves_unseeded_and_says_why_seeded_fails() -> None:
    state = FakeState()
    state.no_seed = True
    with serve(fake_sglang(state)) as url:
        eng = SGLangEngine(url, policy=FAST_RETRY)
        plain = asyncio.run(eng.generate([[3, 4]], SamplingParams(max_new_tokens=2)))[0]
        seeded = SamplingParams(max_new_tokens=2, seed=7)
        first = asyncio.run(eng.generate([[3, 4]], seeded))[0]
        sent = len(state.calls)
        again = asyncio.run(eng.generate([[3, 4]], seeded))[0]
        asyncio.run(eng.aclose())
    assert plain.status is GenStatus.LENGTH and plain.token_ids == [5, 6]
    for gen in (first, again):
        assert gen.status is GenStatus.ERROR and gen.token_ids == []
        assert "does not accept sampling_seed" in gen.error and "unset the seeds" in gen.error
    assert len(state.calls) == sent  # known now: the second seeded request is not sent


# ------------------------------------------------------------------------------------ balancer
class GatedEngine:
    """A fake endpoint: answers after `gate` opens; can be dead."""

    def __init__(self, name: str, alive: bool = True) -> None:
        self.name, self.alive = name, alive
        self.gate = asyncio.Event()
        self.calls = 0
        self.updates: list[str] = []
        self.update_ok = True
        self.policy_version = 0

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        self.calls += 1
        if not self.alive:
            return [Generation(status=GenStatus.ERROR, error="connect refused") for _ in prompts]
        await self.gate.wait()
        return [
            Generation(
                status=GenStatus.OK,
                token_ids=[len(self.name)],
                logprobs=[-1.0],
                finish_reason="stop",
            )
            for _ in prompts
        ]

    async def update_weights(self, path: str, version: int) -> bool:
        self.updates.append(path)
        return self.update_ok

    async def health(self) -> bool:
        return self.alive

    async def aclose(self) -> None:
        return None


def test_balancer_least_outstanding() -> None:
    async def scenario() -> tuple[list[int], list[int]]:
        a, b = GatedEngine("a"), GatedEngine("bb")
        bal = BalancedEngine([a, b])
        params = SamplingParams(max_new_tokens=1)
        first = [asyncio.create_task(bal.generate([[1]], params)) for _ in range(3)]
        await asyncio.sleep(0.01)
        loads = bal.outstanding  # 3 requests over 2 idle endpoints: 2 on a (tie -> a), 1 on b
        b.gate.set()  # b drains; a stays busy
        await asyncio.sleep(0.01)
        nxt = await bal.generate([[1]], params)  # a has 2 outstanding, b has 0 -> b
        a.gate.set()
        await asyncio.gather(*first)
        return loads, nxt[0].token_ids

    loads, ids = asyncio.run(scenario())
    assert loads == [2, 1] and ids == [2]


def test_balancer_skips_dead_endpoint_and_fans_out_updates() -> None:
    async def scenario() -> None:
        dead, live = GatedEngine("dead", alive=False), GatedEngine("live")
        live.gate.set()
        bal = BalancedEngine([dead, live], health_recheck_s=60)
        gens = await bal.generate([[1], [2], [3]], SamplingParams(max_new_tokens=1))
        assert all(g.status is GenStatus.OK and g.token_ids == [4] for g in gens)
        calls_dead = dead.calls
        await bal.generate([[4]], SamplingParams(max_new_tokens=1))
        assert dead.calls == calls_dead  # benched until the recheck time
        assert await bal.health() is True
        assert (
            await bal.update_weights("/ckpt", 5) is True
            and dead.updates == ["/ckpt"] == live.updates
        )
        assert bal.policy_version == 5
        live.update_ok = False
        assert await bal.update_weights("/ckpt2", 6) is False
        gens = await bal.generate([[5]], SamplingParams(max_new_tokens=1))
        assert gens[0].status is GenStatus.ERROR  # the only live endpoint has stale weights

    asyncio.run(scenario())


def test_balancer_over_http_with_a_dead_url() -> None:
    state = FakeState()
    with serve(fake_vllm(state)) as url:
        cfg = EngineConfig(
            type="balanced",
            backend="vllm",
            served_model_name="m",
            urls=[f"http://127.0.0.1:{free_port()}", url],
            max_attempts=2,
            backoff_s=0.01,
        )
        bal = build_engine(cfg)
        gens = asyncio.run(bal.generate([[1], [2], [3], [4]], SamplingParams(max_new_tokens=2)))
        asyncio.run(bal.aclose())
    assert [g.token_ids for g in gens] == [[2, 3], [3, 4], [4, 5], [5, 6]]
    assert all(g.status is GenStatus.LENGTH for g in gens)
