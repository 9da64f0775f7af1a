"""Helpers shared by the GPU calibration benchmarks (kernelbench_self.py, timing_consistency.py,
field_honest.py, parallel_cli.py, eval_server.py).

Covers: `ResultFile` (a JSON result written atomically after every row, resumable: rows already
in the file are skipped on the next call, session walls add up), `judge_all` (a bounded pool of
evaluation threads that stops submitting at a time box, so a time-limited call keeps what it
finished), `DevicePeak` (device-wide memory in use, sampled: every process on the GPU), the
KernelBench problem list, the environment record, and `serve_eval` (a `tritonforge serve-eval`
subprocess on a free loopback port, stopped by SIGTERM to its pid). Not a library: benchmarks
only.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from tritonforge.types import Problem, Verdict  # noqa: E402

GIB = 1 << 30


def add_retry_arg(ap: Any) -> None:
    ap.add_argument(
        "--retry", default="", metavar="STATUS[,STATUS]",
        help="judge again the rows of an earlier call with these statuses (e.g. judge_fault; "
        "STATUS@KEY_PREFIX narrows one, e.g. reward_hack@hybrid:)",
    )  # fmt: skip


def known_names(ap: Any, flag: str, text: str, known: Iterable[str]) -> list[str]:
    """The comma-separated names of `text`, each one of `known`; else the parser's error (exit
    2) naming the unknown ones and the known ones."""
    names = [x.strip() for x in text.split(",") if x.strip()]
    known = list(known)
    unknown = sorted(set(names) - set(known))
    if unknown or not names:
        ap.error(f"{flag}: unknown {unknown or 'empty list'}; known: {', '.join(known)}")
    return names


def retry_statuses(args: Any) -> frozenset[str]:
    return frozenset(x for x in str(args.retry).split(",") if x)


def _retried(row: dict[str, Any], retry: frozenset[str]) -> bool:
    """Whether `row` is to be judged again: an entry STATUS, or STATUS@KEY_PREFIX."""
    for entry in retry:
        status, _, prefix = entry.partition("@")
        if row.get("status") == status and str(row.get("key", "")).startswith(prefix):
            return True
    return False


class ResultFile:
    """A JSON document with `rows` (each with a unique `key`) rewritten after every row."""

    def __init__(self, path: Path, header: dict[str, Any], retry: frozenset[str] = frozenset()):
        """`retry`: statuses whose rows of an earlier call are dropped, to be judged again (e.g.
        `judge_fault`: the evaluator's failure, not the candidate's); `retried` counts them."""
        self.path = path
        self.lock = threading.Lock()
        self.doc: dict[str, Any] = {**header, "rows": [], "sessions": []}
        if path.is_file():
            old = json.loads(path.read_text())
            self.doc["rows"] = old.get("rows", [])
            self.doc["sessions"] = old.get("sessions", [])
            for k, v in old.items():
                self.doc.setdefault(k, v)
        kept = [r for r in self.doc["rows"] if not _retried(r, retry)]
        self.doc["retried"] = self.doc.get("retried", 0) + len(self.doc["rows"]) - len(kept)
        self.doc["rows"] = kept
        self.session = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_s": 0.0, "rows": 0}
        self.doc["sessions"].append(self.session)
        self.t0 = time.monotonic()

    def drop_session(self) -> None:
        """Nothing was done in this call: it does not count (wall, sessions)."""
        self.doc["sessions"].remove(self.session)

    def done(self) -> set[str]:
        return {r["key"] for r in self.doc["rows"]}

    def rows(self, prefix: str = "") -> list[dict[str, Any]]:
        return [r for r in self.doc["rows"] if r["key"].startswith(prefix)]

    def add(self, row: dict[str, Any], update: Callable[[dict[str, Any]], None]) -> None:
        with self.lock:
            self.doc["rows"].append(row)
            self.session["rows"] += 1
            self.save(update)

    def save(self, update: Callable[[dict[str, Any]], None] = lambda doc: None) -> None:
        """Recompute the summary (`update`) and write atomically."""
        self.session["wall_s"] = round(time.monotonic() - self.t0, 2)
        self.doc["wall_s"] = round(sum(s["wall_s"] for s in self.doc["sessions"]), 2)
        update(self.doc)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1) + "\n")
        os.replace(tmp, self.path)


def verdict_row(key: str, v: Verdict, **extra: Any) -> dict[str, Any]:
    """The per-judgement fields the benchmarks record."""
    return {
        "key": key,
        "problem": v.problem_id,
        "status": v.status.value,
        "rule": v.rule,
        "message": v.message.splitlines()[0][:300] if v.message else "",
        "wall": v.wall_seconds,
        "speedup": v.speedup,
        "speedup_ci": v.speedup_ci,
        "speedup_vs_compile": v.speedup_vs_compile,
        "runtime_ms": v.runtime.median_ms if v.runtime else None,
        "ref_ms": v.ref_runtime.median_ms if v.ref_runtime else None,
        "clock": v.timing_clock,
        "phases": v.phase_seconds,
        **extra,
    }


def judge_all(
    evaluate: Callable[[str, Problem, str], Verdict],
    jobs: Iterable[tuple[str, Problem, str]],
    workers: int,
    on_done: Callable[[str, Verdict], None],
    deadline: float,
    shares: list[float | None] | None = None,
) -> int:
    """Judge (key, problem, source) jobs with `workers` in flight, started in the order of
    evaluation/batch_order.py (`shares`: each job's estimated share of the device's memory; None:
    in the given order); no new job starts after `deadline` (time.monotonic). Returns how many
    finished."""
    from tritonforge.evaluation.batch_order import run_jobs

    return run_jobs(
        lambda job: evaluate(*job),
        list(jobs),
        shares,
        workers,
        lambda i, job, v: on_done(job[0], v),
        deadline,
    )


class DevicePeak:
    """Peak device memory in use by every process (CUDA's free/total), sampled in a thread."""

    def __init__(self, device: str, period_s: float = 0.25):
        self.device, self.period = device, period_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> DevicePeak:
        if self.device.startswith("cuda"):
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        import torch

        while not self._stop.is_set():
            free, total = torch.cuda.mem_get_info(torch.device(self.device))
            self.peak = max(self.peak, total - free)
            self._stop.wait(self.period)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def gib(self) -> float | None:
        return round(self.peak / GIB, 2) if self.device.startswith("cuda") else None


def kernelbench(levels: list[int], limit: int | None, size: str, every: int = 1) -> list[Problem]:
    """KernelBench problems of `levels` (the shared data): every `every`-th of each level by
    problem id, at most `limit` of each; scaled (when asked) after choosing."""
    from tritonforge.problems.kernelbench import load_kernelbench_original, scale_kernelbench

    chosen: list[Problem] = []
    for level in levels:
        ps = sorted(load_kernelbench_original(None, [level]), key=lambda p: p.problem_id)
        ps = ps[:: max(1, every)]
        chosen += ps[:limit] if limit else ps
    if size in ("scaled", "cpu"):
        chosen = scale_kernelbench(chosen)
    return chosen


def median_or(xs: list[float], default: float) -> float:
    return statistics.median(xs) if xs else default


def environment(device: str) -> dict[str, Any]:
    import torch
    import triton

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        env["gpu"] = props.name
        env["gpu_memory_gib"] = round(props.total_memory / GIB, 1)
    return env


def percentile(xs: list[float], q: float, digits: int | None = None) -> float | None:
    """Nearest-rank percentile (q in 0..1) of xs, rounded to `digits` when given; None when empty.

    Round a median and its percentiles to the same digits: rounding is monotonic, so
    p05 <= median <= p95 then holds of the printed figures too."""
    if not xs:
        return None
    ys = sorted(xs)
    v = ys[min(len(ys) - 1, max(0, round(q * (len(ys) - 1))))]
    return v if digits is None else round(v, digits)


def child_env() -> dict[str, str]:
    """This environment with the repository's src first on PYTHONPATH (for child processes)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [env.get("PYTHONPATH")])])
    return env


def start_service(
    device: str, workers: int, log_path: Path, sets: Iterable[str] = ()
) -> tuple[subprocess.Popen, str, float]:
    """`tritonforge serve-eval` on a free loopback port: (process, url, start-up seconds)."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "tritonforge", "--log-level", "warning", "serve-eval",
           "--host", "127.0.0.1", "--port", str(port), "--device", device,
           "--workers", str(workers)]  # fmt: skip
    for item in sets:
        cmd += ["--set", item]
    t0 = time.monotonic()
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=child_env())
    url = f"http://127.0.0.1:{port}"
    while time.monotonic() - t0 < 300:
        if proc.poll() is not None:
            raise RuntimeError("server exited:\n" + log_path.read_text()[-3000:])
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url, time.monotonic() - t0
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not come up:\n" + log_path.read_text()[-3000:])


def stop_service(proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """SIGTERM to the server we started (by pid; it drains), SIGKILL after `timeout`."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def serve_eval(
    device: str, workers: int, log_path: Path, sets: Iterable[str] = ()
) -> Iterator[tuple[str, float]]:
    """A running `serve-eval` for the block: yields (url, start-up seconds)."""
    proc, url, startup_s = start_service(device, workers, log_path, sets)
    try:
        yield url, startup_s
    finally:
        stop_service(proc)
