"""The multi-turn agent: token in / token out, masks, feedback turns, early stop, failures.

Two engines: the real in-process HF engine on the tiny model with the real sandboxed evaluator
(token consistency across turns, masks, logprob alignment), and a scripted engine that answers
with given texts, for the control flow a random model cannot reach (a correct first turn, a
failed generation). Also pass@k of bench-model by hand.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from tritonforge.commands.bench_model import pass_at_k
from tritonforge.config.engine import HFEngineConfig
from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator, LocalBackend
from tritonforge.problems import load_suite
from tritonforge.rollout.agent import Agent, AgentConfig, ChatFrame
from tritonforge.rollout.engines.base import SamplingParams, build_engine
from tritonforge.rollout.prompts import PromptConfig
from tritonforge.rollout.tasks import TaskConfig, build_task
from tritonforge.rollout.tiny_model import ensure_tiny_model
from tritonforge.types import Generation, GenStatus, Status


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return ensure_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def tokenizer(tiny: Path):
    return AutoTokenizer.from_pretrained(tiny)


@pytest.fixture(scope="module")
def backend():
    b = LocalBackend(Evaluator(EvalSettings(device="cpu")))
    yield b
    asyncio.run(b.aclose())


def _task(backend):
    s = EvalSettings(device="cpu")
    return build_task(TaskConfig(prompt=PromptConfig(include_example=False)), backend, s)


def test_real_engine_turns_are_token_exact(tiny: Path, tokenizer, backend) -> None:
    engine = build_engine(HFEngineConfig(model_path=str(tiny)))
    cfg = AgentConfig(
        max_turns=2,
        early_stop="never",
        sampling=SamplingParams(max_new_tokens=12, temperature=1.0, seed=3),
    )
    agent = Agent(engine, tokenizer, _task(backend), cfg)
    relu = next(p for p in load_suite("builtin", size="cpu") if p.name == "relu")
    trajs = asyncio.run(agent.run([(relu, 0, "g"), (relu, 1, "g")]))
    asyncio.run(engine.aclose())
    for t in trajs:
        assert t.status == "ok" and len(t.turns) == 2
        t0, t1 = t.turns
        # turn 1's context = turn 0's context + turn 0's response + feedback, exactly
        ctx1 = t.token_ids[: t1.prompt_len]
        assert ctx1[: t0.prompt_len] == t.prompt_ids
        assert ctx1[t0.prompt_len : t0.prompt_len + len(t0.response_ids)] == t0.response_ids
        assert ctx1[t0.prompt_len + len(t0.response_ids) :] == t0.feedback_ids
        assert t.token_ids[t1.prompt_len :] == t1.response_ids  # ends on model tokens
        # loss mask is 1 on model tokens only; logprobs sit where the mask is 1
        model_pos = [i for i, m in enumerate(t.loss_mask) if m]
        assert [t.token_ids[i] for i in model_pos] == t0.response_ids + t1.response_ids
        assert [
            t.rollout_logprobs[i] for i in model_pos
        ] == t0.response_logprobs + t1.response_logprobs
        assert all(lp == 0.0 for lp, m in zip(t.rollout_logprobs, t.loss_mask) if not m)
        assert t0.verdict is not None and t0.verdict.status is Status.NO_CODE
        assert "ModelNew" in t0.feedback_text
        assert len(t.loss_mask) == len(t.token_ids) == len(t.rollout_logprobs)


class ScriptedEngine:
    """Answers each call with the next scripted text (or a failure); real tokenizer."""

    def __init__(self, tokenizer, replies: list[str | None]):
        self.tok, self.replies, self.calls = tokenizer, list(replies), 0
        self.eot = ChatFrame(tokenizer).eot

    @property
    def policy_version(self) -> int:
        return 7

    async def generate(self, prompts, params):
        out = []
        for _ in prompts:
            text = self.replies[self.calls % len(self.replies)]
            self.calls += 1
            if text is None:
                out.append(Generation(status=GenStatus.ERROR, error="server down"))
                continue
            ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.eot]
            out.append(
                Generation(
                    status=GenStatus.OK,
                    token_ids=ids,
                    logprobs=[-0.5] * len(ids),
                    finish_reason="stop",
                )
            )
        return out

    async def aclose(self) -> None:
        return None


def test_correct_first_turn_stops_and_failed_call_leaves_no_turn(tokenizer, backend) -> None:
    relu = next(p for p in load_suite("builtin", size="cpu") if p.name == "relu")
    solution = f"```python\n{relu.solution_src}\n```"
    cfg = AgentConfig(max_turns=3)
    good = Agent(ScriptedEngine(tokenizer, [solution]), tokenizer, _task(backend), cfg)
    (t,) = asyncio.run(good.run([(relu, 0, "g")]))
    assert len(t.turns) == 1 and t.turns[0].verdict.status is Status.CORRECT
    assert t.turns[0].reward == pytest.approx(0.3) and t.turns[0].ret == pytest.approx(0.3)
    assert t.policy_version == 7 and t.turns[0].feedback_ids == []
    # a failed engine call: no fake assistant turn, the sample is marked failed
    bad = Agent(ScriptedEngine(tokenizer, [None]), tokenizer, _task(backend), cfg)
    (f,) = asyncio.run(bad.run([(relu, 0, "g")]))
    assert f.status == "generation_failed" and f.turns == [] and sum(f.loss_mask) == 0
    assert f.token_ids == f.prompt_ids
    # a failure on turn 2 keeps turn 1 and drops its dangling feedback
    mixed = Agent(ScriptedEngine(tokenizer, ["no code here", None]), tokenizer, _task(backend), cfg)
    (m,) = asyncio.run(mixed.run([(relu, 0, "g")]))
    assert m.status == "ok" and len(m.turns) == 1 and m.turns[0].feedback_ids == []
    assert m.token_ids[-len(m.turns[0].response_ids) :] == m.turns[0].response_ids


def test_returns_are_discounted_per_turn(tokenizer, backend) -> None:
    relu = next(p for p in load_suite("builtin", size="cpu") if p.name == "relu")
    solution = f"```python\n{relu.solution_src}\n```"
    agent = Agent(
        ScriptedEngine(tokenizer, ["nothing", solution]),
        tokenizer,
        _task(backend),
        AgentConfig(max_turns=2),
    )
    (t,) = asyncio.run(agent.run([(relu, 0, "g")]))
    assert [x.reward for x in t.turns] == [0.0, pytest.approx(0.3)]
    # R_0 = 0 + 0.4 * 0.3 = 0.12, R_1 = 0.3
    assert t.turns[0].ret == pytest.approx(0.12) and t.turns[1].ret == pytest.approx(0.3)
    assert t.raw_reward == pytest.approx(0.12)


def test_pass_at_k_by_hand() -> None:
    assert pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    # 1 - C(2,2)/C(4,2) = 1 - 1/6
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)
    assert pass_at_k(4, 3, 2) == 1.0


def test_speedup_early_stop_keeps_improving_a_correct_answer(tokenizer, backend) -> None:
    """early_stop="speedup" (the GPU configs): a correct turn below the speedup target gets the
    'make it faster' feedback and another turn; untimed (CPU) counts as below the target."""
    relu = next(p for p in load_suite("builtin", size="cpu") if p.name == "relu")
    solution = f"```python\n{relu.solution_src}\n```"
    cfg = AgentConfig(max_turns=2, early_stop="speedup", stop_speedup=2.0)
    agent = Agent(ScriptedEngine(tokenizer, [solution]), tokenizer, _task(backend), cfg)
    (t,) = asyncio.run(agent.run([(relu, 0, "g")]))
    assert [x.verdict.status for x in t.turns] == [Status.CORRECT, Status.CORRECT]
    assert "faster" in t.turns[0].feedback_text


@pytest.mark.parametrize("name", ["single-gpu", "multi-node"])
def test_gpu_configs_continue_after_a_correct_turn(name: str) -> None:
    from tritonforge.config import load_config
    from tritonforge.config.run import TrainRunConfig

    root = Path(__file__).resolve().parents[2]
    cfg = load_config(TrainRunConfig, str(root / "configs" / f"{name}.toml"), [])
    assert cfg.agent.early_stop == "speedup" and cfg.agent.stop_speedup == 2.0
