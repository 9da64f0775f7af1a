"""The verdict memo: repeats answered from memory, transient and timed verdicts judged again."""

from __future__ import annotations

import asyncio

from tritonforge.config.eval import EvalSettings
from tritonforge.config.rollout import EvalBackendConfig
from tritonforge.rollout.runner import build_eval_backend
from tritonforge.rollout.verdict_cache import CachedBackend
from tritonforge.types import Problem, Status, Timing, Verdict

P = Problem(id="t/p", suite="t", name="p", reference_src="ref")


class Counting:
    """A backend answering from a script of verdicts, counting calls."""

    def __init__(self, script: dict[str, Verdict]) -> None:
        self.script, self.calls = script, 0

    async def evaluate(self, problem, source, settings=None) -> Verdict:
        self.calls += 1
        return self.script[source].model_copy(deep=True)

    async def aclose(self) -> None:
        self.closed = True


def test_repeats_hit_the_memo_and_only_deterministic_verdicts_are_kept() -> None:
    timed = Verdict(
        status=Status.CORRECT,
        runtime=Timing(median_ms=1, mean_ms=1, std_ms=0, min_ms=1, max_ms=1, trials=3),
        speedup=2.0,
    )
    inner = Counting(
        {
            "ok": Verdict(status=Status.CORRECT, message="ok"),
            "slow": Verdict(status=Status.TIMEOUT),
            "timed": timed,
        }
    )
    cache = CachedBackend(inner)
    s = EvalSettings(device="cpu")

    async def go() -> list[Verdict]:
        out = [await cache.evaluate(P, src, s) for src in ["ok", "ok", "slow", "slow", "timed"]]
        out[1].message = "changed"  # a returned verdict is a copy: the memo is not changed
        out.append(await cache.evaluate(P, "ok", s))
        out.append(await cache.evaluate(P, "timed", s))
        out.append(await cache.evaluate(P, "ok", s.model_copy(update={"correctness_trials": 9})))
        out.append(await cache.evaluate(P.model_copy(update={"reference_src": "r2"}), "ok", s))
        await cache.aclose()
        return out

    out = asyncio.run(go())
    assert [v.status for v in out[:2]] == [Status.CORRECT] * 2 and out[5].message == "ok"
    # calls: ok, slow, slow, timed, timed, ok (other settings), ok (other reference)
    assert inner.calls == 7 and cache.counts == {"hits": 2, "misses": 7}
    assert inner.closed


def test_config_switch_wraps_the_backend() -> None:
    assert not isinstance(build_eval_backend(EvalBackendConfig(type="http")), CachedBackend)
    wrapped = build_eval_backend(EvalBackendConfig(type="http", cache=True))
    assert isinstance(wrapped, CachedBackend)
