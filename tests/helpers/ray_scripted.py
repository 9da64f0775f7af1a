"""Helper of test_ray_loop.py: an engine that answers with canned kernels (a random tiny model
never writes code, so nothing would reach the evaluation actors). Generation is scripted; the
weights live in a real HFEngine, so weight pushes, versions and checksums are real.

Responses cycle per engine over: the problem's correct solution, a wrong one (output + 1: a
numerical mismatch) and a syntax error, so verdicts and rewards vary within groups."""

from __future__ import annotations

from typing import Any

WRONG = (
    "tl.store(out_ptr + offsets, y, mask=mask)",
    "tl.store(out_ptr + offsets, y + 1.0, mask=mask)",
)


def answers_for(problems: list[Any]) -> dict[str, list[str]]:
    """Marker (the reference's docstring line) -> [correct, wrong, syntax error] responses."""
    out = {}
    for p in problems:
        marker = next(line.strip() for line in p.reference_src.splitlines() if '"""' in line)
        good = p.solution_src
        assert WRONG[0] in good, p.id
        bad = good.replace(*WRONG)
        out[marker] = [f"```python\n{x}\n```" for x in (good, bad, "def broken(:\n    pass\n")]
    return out


class ScriptedEngine:
    def __init__(self, inner: Any, tokenizer: Any, answers: dict[str, list[str]]) -> None:
        self.inner, self.tok, self.answers = inner, tokenizer, answers
        self.eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.calls = 0

    @property
    def policy_version(self) -> int:
        return self.inner.policy_version

    @property
    def model(self) -> Any:
        return self.inner.model

    async def generate(self, prompts: list[list[int]], params: Any) -> list[Any]:
        from tritonforge.types import Generation, GenStatus

        out = []
        for ids in prompts:
            text = self.tok.decode(ids)
            marker = next(m for m in self.answers if m in text)
            reply = self.answers[marker][self.calls % 3]
            self.calls += 1
            tokens = [*self.tok.encode(reply, add_special_tokens=False), self.eot]
            out.append(
                Generation(
                    status=GenStatus.OK,
                    token_ids=tokens,
                    logprobs=[-1.0] * len(tokens),
                    finish_reason="stop",
                )
            )
        return out

    async def update_weights(self, path: str, version: int) -> bool:
        return await self.inner.update_weights(path, version)

    async def load_state_dict(self, state_dict: dict, version: int) -> bool:
        return await self.inner.load_state_dict(state_dict, version)

    async def health(self) -> bool:
        return True

    async def aclose(self) -> None:
        await self.inner.aclose()


def make_factory(problems: list[Any]):
    """EngineConfig -> ScriptedEngine over the configured HF model (pickled by value to actors)."""
    answers = answers_for(problems)

    def factory(cfg: Any) -> ScriptedEngine:
        from transformers import AutoTokenizer

        from tritonforge.rollout.engines.hf import HFEngine

        inner = HFEngine.from_config(cfg)
        return ScriptedEngine(inner, AutoTokenizer.from_pretrained(cfg.model_path), answers)

    return factory


class Bystander:
    """An actor the run did not create: its shutdown must leave it alone."""

    def ping(self) -> str:
        return "alive"
