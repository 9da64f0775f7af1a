"""The evaluator survives what candidates and accidents do to it, and keeps its CLI contracts.

Covers: one Evaluator judging a correct candidate after each of a crash, a timeout and a
resource-limit candidate; stdout/stderr floods capped (head + tail, no hang); the fork server
restarted after it is killed between evaluations (its own pid, started by this test) and an
internal_error (not a crash blamed on the candidate) when it dies during one; an unknown reward
name and broken references give internal_error verdicts, never exceptions; `eval-kernel --json`
(last stdout line is the verdict, exit 0 for a failing candidate, 2 for a missing file);
`eval-dir` over a folder with 3 solutions, 1 broken and 1 unmatched file (summary files
written, missing problems counted as failures). Does not cover: reward-hack attacks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.types import Problem, Status

CORPUS = Path(__file__).resolve().parent / "status_corpus"
REF = CORPUS / "ref_relu.py"
PROBLEM = Problem(id="robust/relu", suite="robust", name="relu", reference_src=REF.read_text())
GOOD = (CORPUS / "correct.py").read_text()

FLOOD = GOOD.replace(
    "        x = x.contiguous()\n",
    "        x = x.contiguous()\n"
    "        for i in range(20000):\n"
    "            print('stdout flood line', i, 'x' * 200)\n"
    "            log.error('stderr flood line %d', i)\n",  # stderr (sys is not allowed)
).replace(
    "import torch\n", "import logging\n\nimport torch\n\nlog = logging.getLogger('flood')\n", 1
)


def fast(**kw) -> EvalSettings:
    s = EvalSettings(device="cpu", correctness_trials=2, secret_seed=99)
    for key, value in kw.items():
        node, _, leaf = key.rpartition("__")
        setattr(getattr(s, node) if node else s, leaf, value)
    return s


@pytest.fixture(scope="module")
def ev() -> Iterator[Evaluator]:
    with Evaluator(fast()) as e:
        yield e


def assert_good(ev: Evaluator) -> None:
    v = ev.evaluate(PROBLEM, GOOD)
    assert v.status is Status.CORRECT, f"{v.status.value}: {v.message}"


@pytest.mark.parametrize(
    ("file", "settings", "status"),
    [
        ("crash.py", fast(), Status.CRASH),
        ("timeout.py", fast(budgets__compile_s=2.0), Status.TIMEOUT),
        ("resource_limit.py", fast(limits__memory_mb=1024), Status.RESOURCE_LIMIT),
        # a wild pointer: refused by the interpreter's bounds check (audit_memory.py), as on a GPU
        ("illegal_memory_access.py", fast(), Status.ILLEGAL_MEMORY_ACCESS),
    ],
)
def test_survives_bad_candidate(ev: Evaluator, file: str, settings, status: Status) -> None:
    v = ev.evaluate(PROBLEM, (CORPUS / file).read_text(), settings)
    assert v.status is status, v.message
    assert_good(ev)


def test_output_flood_is_capped(ev: Evaluator) -> None:
    t0 = time.monotonic()
    v = ev.evaluate(PROBLEM, FLOOD, fast(limits__output_bytes=4096))
    assert time.monotonic() - t0 < 60
    assert v.status is Status.CORRECT, v.message
    for tail, what in ((v.stdout_tail, "stdout"), (v.stderr_tail, "stderr")):
        assert len(tail) <= 4096 + 100, what  # head + tail + one "[N bytes dropped]" line
        assert "bytes dropped" in tail and tail.startswith(f"{what} flood line 0")
        assert f"{what} flood line 19999" in tail  # the very end is kept


def test_fork_server_restarted_after_kill(ev: Evaluator) -> None:
    assert_good(ev)
    srv = ev.started()["cpu"].server
    old = srv.proc
    os.kill(old.pid, signal.SIGKILL)  # the server this test's Evaluator started
    # regression: the very next candidate used to get internal_error ("fork server did not
    # answer") when it came before the judge noticed the death; now the server is restarted
    assert_good(ev)
    old.wait(timeout=10)
    assert srv.proc is not None and srv.proc.pid != old.pid and srv.alive


def test_fork_server_killed_mid_evaluation(ev: Evaluator) -> None:
    assert_good(ev)
    srv = ev.started()["cpu"].server
    pid = srv.proc.pid
    box: dict = {}
    t = threading.Thread(
        target=lambda: box.setdefault(
            "v",
            ev.evaluate(
                PROBLEM, (CORPUS / "timeout.py").read_text(), fast(budgets__compile_s=30.0)
            ),
        )
    )
    t.start()
    time.sleep(2.0)  # the worker is sleeping in forward by now
    os.kill(pid, signal.SIGKILL)
    t.join(timeout=60)
    v = box["v"]
    # regression: this used to be status crash ("exit status unknown"), blaming the candidate,
    # and took ~17 s (a server restart and a 10 s wait for an exit the new server never sees)
    assert v.status is Status.INTERNAL_ERROR, f"{v.status.value}: {v.message}"
    assert "fork server died" in v.message
    assert v.wall_seconds < 7.0
    assert_good(ev)


def test_a_reward_in_the_judges_settings_is_refused_with_where_it_went() -> None:
    """The judge states facts; a reward is the task's (task.reward): settings naming one are
    refused with the key to use instead, never silently judged under another reward."""
    with pytest.raises(ValueError, match=r"hack_penalty, reward moved .* task\.hack_penalty"):
        EvalSettings(device="cpu", reward="kevin", hack_penalty=-1.0)


@pytest.mark.parametrize(
    ("src", "fragment"),
    [
        ("import torch\nclass Model(torch.nn.Module):\n    pass\n", "defines no get_inputs"),
        ("this is not python", "failed to load"),
        (
            REF.read_text().replace("return []", "return [1, 2, 3]"),  # Model() takes no args
            "failed to build",
        ),
        (REF.read_text().replace("torch.relu(x)", "x @ x"), "failed on its own inputs"),
    ],
    ids=["no_get_inputs", "not_python", "bad_init_inputs", "forward_raises"],
)
def test_broken_reference_is_internal_error(ev: Evaluator, src: str, fragment: str) -> None:
    broken = Problem(
        id=f"robust/broken_{abs(hash(src))}", suite="robust", name="b", reference_src=src
    )
    v = ev.evaluate(broken, GOOD)
    assert v.status is Status.INTERNAL_ERROR and v.phase == "reference", v.message
    assert fragment in v.message and not v.correct


def test_none_and_garbage_sources(ev: Evaluator) -> None:
    assert ev.evaluate(PROBLEM, None).status is Status.NO_CODE
    assert ev.evaluate(PROBLEM, "   \n").status is Status.NO_CODE
    assert ev.evaluate(PROBLEM, "\x00\x01 not code").status is Status.SYNTAX_ERROR


# -- CLI contracts ---------------------------------------------------------------------------------


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tritonforge.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


JSON_KEYS = {"status", "compiled", "correct", "speedup", "reward", "message"}


@pytest.mark.slow
def test_eval_kernel_json_contract(tmp_path: Path) -> None:
    r = _cli(
        "eval-kernel",
        str(REF),
        str(CORPUS / "numerical_mismatch.py"),
        "--json",
        "--device",
        "cpu",
        "--trials",
        "2",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert JSON_KEYS <= set(out)
    assert out["status"] == "numerical_mismatch" and out["correct"] is False
    assert out["compiled"] is True and out["speedup"] is None
    assert out["reward"] == pytest.approx(0.1) and "1/6400" in out["message"]

    missing = _cli("eval-kernel", str(REF), str(tmp_path / "nope.py"), "--json")
    assert missing.returncode == 2 and "nope.py" in missing.stderr


@pytest.mark.slow
def test_eval_dir_summary(tmp_path: Path) -> None:
    from tritonforge.cli import main
    from tritonforge.problems import load_suite

    problems = {p.name: p for p in load_suite("builtin", size="cpu")}
    cand = tmp_path / "cands"
    cand.mkdir()
    for name in ("relu", "tanh", "sigmoid"):
        (cand / f"{name}.py").write_text(problems[name].solution_src)
    (cand / "gelu.py").write_text("class ModelNew(:\n")  # broken
    (cand / "not_a_problem.py").write_text(problems["relu"].solution_src)  # unmatched
    out = tmp_path / "out"
    argv = ["eval-dir", str(cand), "--suite", "builtin", "--size", "cpu", "--device", "cpu"]
    code = main([*argv, "--out", str(out), "--trials", "2", "--workers", "2"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    n = len(problems)
    assert summary["problems"] == n and summary["evaluated"] == 4 and summary["correct"] == 3
    assert summary["correctness_rate"] == pytest.approx(3 / n)
    assert summary["fault_histogram"] == {"missing": n - 4, "correct": 3, "syntax_error": 1}
    assert len(summary["missing"]) == n - 4 and "builtin/gelu" not in summary["missing"]
    assert summary["unmatched_files"] == ["not_a_problem.py"]
    assert summary["mean_reward"] == pytest.approx(3 * 0.3 / n)
    assert summary["timed"] is False and summary["fast_1"] is None
    md = (out / "summary.md").read_text()
    assert "| correct | 3 |" in md and "| missing |" in md
    assert (out / "summary.png").stat().st_size > 1000
    assert len((out / "verdicts.jsonl").read_text().splitlines()) == 4
