"""Every request gets a verdict: non-finite numbers in a verdict reach the client as JSON null.

Covers: real HTTP servers on loopback (uvicorn in a thread; `create_app` over an EvalService)
answering candidates whose outputs are NaN or inf (a real CPU Evaluator: the mismatch details
hold them) and verdicts whose times, speedups, intervals, reward, share and phase times are NaN
or inf (a stand-in judge: on the CPU nothing is timed, so those come from what a GPU judgement
can hold), through every endpoint that answers with a verdict: /v1/eval, /v1/eval/batch and the
KernelBench-compatible /eval. Each answer must be HTTP 200 and parse with a strict parser that
rejects NaN/Infinity, carry null where the value was, a note saying so, and, for /v1/eval, parse
back into a Verdict with the non-finite values restored from the notes. Before the fix these answers were HTTP 500 (starlette's JSONResponse refuses
NaN). Does not cover: the service's queueing (test_server.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from helpers.live_server import serve
from tritonforge.config.eval import EvalSettings
from tritonforge.config.server import ServerConfig
from tritonforge.evaluation.service.server import create_app
from tritonforge.evaluation.service.service import EvalService
from tritonforge.problems import load_suite
from tritonforge.types import Audit, Mismatch, Problem, Status, Timing, Verdict

RELU = next(p for p in load_suite("builtin", size="cpu") if p.name == "relu")
FAST = {"correctness_trials": 2}
NAN, INF = float("nan"), float("inf")
# relu solutions whose outputs are inf/-inf/nan (x / 0) and nan everywhere
NONFINITE_OUTPUTS = {
    "inf": (RELU.solution_src or "").replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.0) / 0.0"),
    "nan": (RELU.solution_src or "").replace("tl.maximum(x, 0.0)", "(x - x) / 0.0"),
}


def strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


@contextmanager
def live_server(service: EvalService, cfg: ServerConfig) -> Iterator[str]:
    """The app on a loopback port in a thread of this process; yields its URL."""
    with serve(create_app(cfg, service), start_timeout=60.0) as url:
        yield url


class NonFiniteJudge:
    """Stand-in Evaluator whose verdicts hold NaN or inf in every float a GPU judgement fills."""

    def evaluate(
        self, problem: Problem, source: str, settings: Any = None, group: Any = None
    ) -> Verdict:
        t = Timing(median_ms=NAN, mean_ms=INF, std_ms=NAN, min_ms=0.0, max_ms=INF, trials=3)
        return Verdict(
            status=Status.CORRECT,
            correct=True,
            compiled=True,
            problem_id=problem.id,
            runtime=t,
            ref_runtime=t,
            ref_compile_runtime=t,
            speedup=NAN,
            speedup_vs_compile=INF,
            speedup_ci=[NAN, INF],
            mismatch=Mismatch(trial=0, distribution="native", max_abs_diff=INF, worst_got=NAN),
            audit=Audit(custom_share=NAN),
            phase_seconds={"timing": INF},
            wall_seconds=NAN,
        )

    def server(self, device: str) -> None:
        return None

    def close(self) -> None:
        return None


@pytest.fixture(scope="module")
def real_url() -> Iterator[str]:
    from tritonforge.evaluation.judge.evaluator import Evaluator

    cfg = ServerConfig(device="cpu", workers=2, warmup=False)
    with Evaluator(EvalSettings(device="cpu")) as ev:
        with live_server(EvalService(cfg, evaluator=ev), cfg) as url:
            yield url


@pytest.fixture(scope="module")
def standin_url() -> Iterator[str]:
    cfg = ServerConfig(device="cpu", workers=1, warmup=False, cache_entries=0)
    with live_server(EvalService(cfg, evaluator=NonFiniteJudge()), cfg) as url:
        yield url


def _requests(source: str) -> dict[str, tuple[str, Any]]:
    one = {"problem": RELU.model_dump(mode="json"), "source": source, "settings": FAST}
    compat = {"original_model_src": RELU.reference_src, "custom_model_src": source,
              "backend": "triton", "num_correct_trials": 2}  # fmt: skip
    return {"v1_eval": ("/v1/eval", one), "batch": ("/v1/eval/batch", [one, one]),
            "compat": ("/eval", compat)}  # fmt: skip


def _post(url: str, path: str, body: Any) -> Any:
    r = httpx.post(url + path, json=body, timeout=300)
    assert r.status_code == 200, (path, r.status_code, r.text[:500])
    return strict_json(r.text)


@pytest.mark.parametrize("kind", sorted(NONFINITE_OUTPUTS))
def test_nonfinite_outputs_through_every_endpoint(real_url: str, kind: str) -> None:
    source = NONFINITE_OUTPUTS[kind] + f"\n# {kind}\n"
    for name, (path, body) in _requests(source).items():
        answer = _post(real_url, path, body)
        verdicts = answer if name == "batch" else [answer]
        for v in verdicts:
            if name == "compat":
                assert v["correctness"] is False and v["metadata"]["tritonforge_status"] == (
                    "numerical_mismatch"
                ), v
                notes = v["metadata"]["notes"]
            else:
                assert v["status"] == "numerical_mismatch", v
                assert v["mismatch"]["worst_got"] is None, v["mismatch"]
                notes = v["notes"]
            assert any(n.startswith("mismatch.worst_got: ") for n in notes), notes
        if name == "v1_eval":  # the client's parse gets the value back from the note
            back = Verdict.model_validate(answer)
            assert back.mismatch is not None and not math.isfinite(back.mismatch.worst_got)


def test_nonfinite_times_through_every_endpoint(standin_url: str) -> None:
    for name, (path, body) in _requests("any source").items():
        answer = _post(standin_url, path, body)
        if name == "compat":
            assert answer["runtime"] == -1.0 and answer["speedup"] == -1.0, answer
            assert answer["runtime_stats"]["median"] is None
            assert "reward" not in answer["metadata"]  # facts only: the task computes rewards
            assert any(n.startswith("runtime.median_ms: ") for n in answer["metadata"]["notes"])
            continue
        for v in answer if name == "batch" else [answer]:
            assert v["speedup"] is None and v["speedup_ci"] == [None, None]
            assert v["runtime"]["median_ms"] is None and v["runtime"]["min_ms"] == 0.0
            assert v["audit"]["custom_share"] is None and v["wall_seconds"] is None
            said = {n.split(": ")[0] for n in v["notes"]}
            assert {"speedup", "runtime.mean_ms", "phase_seconds.timing"} <= said
            back = Verdict.model_validate(v)  # the client's parse: the values come back
            assert back.runtime is not None and back.runtime.mean_ms == INF
            assert math.isnan(back.speedup) and math.isnan(back.runtime.median_ms)
            assert back.speedup_ci is not None and back.speedup_ci[1] == INF
