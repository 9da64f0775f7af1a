"""Load test of `tritonforge serve-eval` on loopback (CPU interpreter).

Starts the server as a subprocess on a free port, sends >= 200 requests at concurrency 16 mixing
correct, wrong, crashing (segfault in a kernel), hanging (sleep past a small budget) and
output-flooding candidates, while polling /health; then kills a sandboxed worker mid-evaluation
(found as a descendant of the server's fork server) and checks the pool recovers. Asserts every
request is answered exactly once with the expected status, the server stays up, and /health
answers within a second throughout. Prints one JSON summary line (run with -s to see it).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tritonforge.evaluation.judge.budget import children
from tritonforge.problems import load_suite

pytestmark = pytest.mark.slow

N_REQUESTS = 210
CONCURRENCY = 16
HEALTH_LIMIT_S = 1.0
PROBLEMS = {p.name: p for p in load_suite("builtin", size="cpu")}
RELU = PROBLEMS["relu"].solution_src or ""
CHEAP = ["relu", "leaky_relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "sum_dim"]
FORWARD = "        x = x.contiguous()"
# candidate bodies that need no module beyond the import allowlist (`time` and `faulthandler`
# are not on it): a future that never completes blocks without using the CPU; a million nested
# map iterators overflow the C stack
HANG = "        torch.futures.Future().wait()\n"
SEGFAULT = (
    "        it = iter([0.0])\n"
    "        for _ in range(1_000_000):\n"
    "            it = map(abs, it)\n"
    "        next(it)\n"
)


def spin(steps: int) -> str:
    """A body busy for about steps / 1e7 seconds."""
    return f"        spin = 0\n        while spin < {steps}:\n            spin += 1\n"


def _with_body(body: str, tag: str) -> str:
    return RELU.replace(FORWARD, body + FORWARD) + f"\n# request {tag}\n"


def make_request(i: int) -> tuple[dict[str, Any], str]:
    """(request body, expected status) for request number i."""
    kind = i % 10
    settings: dict[str, Any] = {"correctness_trials": 2}
    if kind in (0, 1, 2, 3):  # correct, unique source (no cache)
        name = CHEAP[i % len(CHEAP)]
        src = (PROBLEMS[name].solution_src or "") + f"\n# request {i}\n"
        return {
            "suite": "builtin",
            "problem_id": name,
            "source": src,
            "settings": settings,
        }, "correct"
    if kind == 4:  # correct, repeated source: cache hits
        body = {"suite": "builtin", "problem_id": "relu", "source": RELU, "settings": settings}
        return body, "correct"
    if kind in (5, 6):  # wrong numbers
        src = RELU.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.0) * 2.0") + f"\n# {i}\n"
        return {"suite": "builtin", "problem_id": "relu", "source": src, "settings": settings}, (
            "numerical_mismatch"
        )
    if kind == 7:  # segfault in forward (an out-of-bounds load in the interpreter is refused
        # as illegal_memory_access before it can crash: sandbox/audit_memory.py)
        src = _with_body(SEGFAULT, str(i))
        return {"suite": "builtin", "problem_id": "relu", "source": src, "settings": settings}, (
            "crash"
        )
    if kind == 8:  # hangs past a small compile budget
        src = _with_body(HANG, str(i))
        hang = {**settings, "budgets": {"compile_s": 2.0}}
        return {"suite": "builtin", "problem_id": "relu", "source": src, "settings": hang}, (
            "timeout"
        )
    src = _with_body("        for _ in range(300):\n            print('y' * 10000)\n", str(i))
    return {
        "suite": "builtin",
        "problem_id": "relu",
        "source": src,
        "settings": settings,
    }, "correct"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def worker_leaf(server_pid: int) -> int | None:
    """The deepest descendant of the server's fork server (the sandboxed worker), if any."""
    forkservers = [c for c in children(server_pid) if "evaluation.sandbox.zygote" in _cmdline(c)]
    best: tuple[int, int] | None = None
    stack = [(c, 1) for f in forkservers for c in children(f)]
    while stack:
        pid, depth = stack.pop()
        kids = children(pid)
        if not kids and (best is None or depth > best[1]):
            best = (pid, depth)
        stack.extend((k, depth + 1) for k in kids)
    return best[0] if best else None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "server.log"
    cmd = [sys.executable, "-m", "tritonforge", "serve-eval", "--host", "127.0.0.1",
           "--port", str(port), "--device", "cpu", "--workers", "4"]  # fmt: skip
    with open(log, "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail("server did not come up:\n" + log.read_text()[-3000:])
    proc.log_path = log  # type: ignore[attr-defined]
    yield proc, url
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # our own child, by PID
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _poll_health(url: str, stop: asyncio.Event, latencies: list[float]) -> None:
    async with httpx.AsyncClient(timeout=5) as c:
        while not stop.is_set():
            t0 = time.monotonic()
            r = await c.get(url + "/health")
            latencies.append(time.monotonic() - t0)
            assert r.status_code == 200
            await asyncio.sleep(0.1)


async def _load(url: str) -> dict[str, Any]:
    requests = [make_request(i) for i in range(N_REQUESTS)]
    answers: dict[int, list[dict[str, Any]]] = {i: [] for i in range(N_REQUESTS)}
    sem = asyncio.Semaphore(CONCURRENCY)
    stop, latencies = asyncio.Event(), []
    health = asyncio.create_task(_poll_health(url, stop, latencies))
    t0 = time.monotonic()
    async with httpx.AsyncClient(timeout=300) as c:

        async def one(i: int) -> None:
            async with sem:
                r = await c.post(url + "/v1/eval", json=requests[i][0])
                assert r.status_code == 200, r.text
                answers[i].append(r.json())

        await asyncio.gather(*(one(i) for i in range(N_REQUESTS)))
        duration = time.monotonic() - t0
        metrics = (await c.get(url + "/metrics")).text
    stop.set()
    await health
    return {"answers": answers, "expected": [e for _, e in requests], "duration": duration,
            "health": latencies, "metrics": metrics}  # fmt: skip


async def _kill_mid_eval(url: str, server_pid: int) -> tuple[dict[str, Any], list[str]]:
    src = _with_body(HANG, "victim")
    body = {"suite": "builtin", "problem_id": "relu", "source": src,
            "settings": {"correctness_trials": 2, "budgets": {"compile_s": 120.0}}}  # fmt: skip
    async with httpx.AsyncClient(timeout=300) as c:
        task = asyncio.create_task(c.post(url + "/v1/eval", json=body))
        victim = None
        for _ in range(200):
            await asyncio.sleep(0.1)
            victim = worker_leaf(server_pid)
            if victim is not None:
                break
        assert victim is not None, "no sandboxed worker found under the fork server"
        await asyncio.sleep(1.5)  # let it reach forward (sleeping)
        os.kill(victim, signal.SIGKILL)  # a descendant of the server we started, by PID
        killed = (await task).json()
        after = []
        for name in ("relu", "gelu", "softmax"):
            src2 = (PROBLEMS[name].solution_src or "") + "\n# after the kill\n"
            r = await c.post(url + "/v1/eval", json={"suite": "builtin", "problem_id": name,
                                                     "source": src2})  # fmt: skip
            after.append(r.json()["status"])
    return killed, after


async def _disconnect_while_queued(url: str) -> tuple[int, float]:
    """Fill the 4 workers, queue a fifth request, drop its connection: it is never judged."""

    def slow(tag: str) -> dict[str, Any]:
        src = _with_body(spin(30_000_000), tag)
        return {"suite": "builtin", "problem_id": "relu", "source": src,
                "settings": {"correctness_trials": 2}}  # fmt: skip

    async with httpx.AsyncClient(timeout=120) as c:
        before = (await c.get(url + "/v1/devices")).json()["devices"][0]["evaluated"]
        busy = [
            asyncio.create_task(c.post(url + "/v1/eval", json=slow(f"busy{i}"))) for i in range(4)
        ]
        await asyncio.sleep(1.0)
        async with httpx.AsyncClient(timeout=120) as gone:
            doomed = asyncio.create_task(gone.post(url + "/v1/eval", json=slow("doomed")))
            await asyncio.sleep(0.5)
            assert (await c.get(url + "/v1/devices")).json()["queued"] == 1
            doomed.cancel()
        for t in busy:
            assert (await t).json()["status"] == "correct"
        await asyncio.sleep(1.0)
        after = (await c.get(url + "/v1/devices")).json()["devices"][0]["evaluated"]
        metrics = (await c.get(url + "/metrics")).text
    return after - before, _metric_sum(metrics, "tritonforge_eval_cancelled_total")


def server_log(proc: subprocess.Popen) -> str:
    return Path(proc.log_path).read_text(errors="replace")  # type: ignore[attr-defined]


def _metric_sum(text: str, prefix: str) -> float:
    return sum(float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith(prefix))


def test_load_mix_kill_and_recovery(server):
    proc, url = server
    res = asyncio.run(_load(url))
    answers, expected = res["answers"], res["expected"]
    assert all(len(a) == 1 for a in answers.values()), "a request was answered more than once"
    got = [answers[i][0]["status"] for i in range(N_REQUESTS)]
    wrong = [
        (i, e, g, answers[i][0]["message"][:200])
        for i, (e, g) in enumerate(zip(expected, got))
        if e != g
    ]
    assert not wrong, wrong[:5]
    flood = [answers[i][0] for i in range(N_REQUESTS) if i % 10 == 9]
    assert all("bytes dropped" in v["stdout_tail"] for v in flood)
    assert all(len(v["stdout_tail"]) < 20000 for v in flood)
    assert sum(answers[i][0]["cached"] for i in range(N_REQUESTS) if i % 10 == 4) >= 15
    # Server-side: exactly one answer counted per request sent.
    served = _metric_sum(res["metrics"], 'tritonforge_eval_requests_total{endpoint="v1_eval"')
    assert served == N_REQUESTS
    assert max(res["health"]) < HEALTH_LIMIT_S, max(res["health"])
    assert proc.poll() is None

    killed, after = asyncio.run(_kill_mid_eval(url, proc.pid))
    assert killed["status"] == "crash" and "SIGKILL" in killed["message"], killed
    assert after == ["correct", "correct", "correct"]
    assert httpx.get(url + "/health", timeout=1).json()["status"] == "ok"
    assert proc.poll() is None

    judged, cancelled = asyncio.run(_disconnect_while_queued(url))
    assert judged == 4 and cancelled == 1  # the abandoned request never reached a worker

    summary = {
        "requests": N_REQUESTS,
        "concurrency": CONCURRENCY,
        "statuses": dict(Counter(got)),
        "duration_s": round(res["duration"], 1),
        "evals_per_min": round(60 * N_REQUESTS / res["duration"], 1),
        "health_polls": len(res["health"]),
        "health_max_s": round(max(res["health"]), 4),
        "killed_worker": killed["message"],
    }
    print("LOAD_SUMMARY " + json.dumps(summary))
    # Graceful stop: SIGTERM while an evaluation runs; it is still answered, then exit 0.
    drained = asyncio.run(_sigterm_mid_eval(url, proc))
    assert drained["status"] == "correct", drained
    assert proc.wait(timeout=90) == 0
    assert "evaluation service stopped" in server_log(proc)


async def _sigterm_mid_eval(url: str, proc: subprocess.Popen) -> dict[str, Any]:
    src = _with_body(spin(15_000_000), "drain")
    body = {"suite": "builtin", "problem_id": "relu", "source": src,
            "settings": {"correctness_trials": 2}}  # fmt: skip
    async with httpx.AsyncClient(timeout=120) as c:
        task = asyncio.create_task(c.post(url + "/v1/eval", json=body))
        await asyncio.sleep(0.7)
        proc.send_signal(signal.SIGTERM)  # our own child, by PID
        return (await task).json()
