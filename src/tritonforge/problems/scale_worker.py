"""Child process of size scaling: measure sources on the meta device, search, validate on CPU.

Covers: the JSON-lines protocol (one task per stdin line, one reply per stdout line), the greedy
search over size constants (each step halves the constant that most reduces the excess over
the budget, ties to the largest value, every step checked by building the model and running
forward on the meta device), the CPU validation run of the result; and, parent side,
`WorkerProcess` (spawn a child, request with a timeout, kill its process group) and the
on-disk cache of replies.
Does not cover: deciding which constants are sizes or rewriting sources (problems.sizing), or
the pool of workers and the results (problems.scaling).
torch is imported only in the child.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, NamedTuple

from tritonforge.logging_setup import get_logger
from tritonforge.problems.sizing import SCALER_VERSION, SizeSpec, rewrite_constants, size_constants

log = get_logger(__name__)

STARTUP_TIMEOUT_S = 120.0  # a fresh child imports torch, warms up, then says it is ready


# --------------------------------------------------------------------------------------------
# Child side
# --------------------------------------------------------------------------------------------


class Measure(NamedTuple):
    inputs: int
    params: int
    outputs: int
    flops: int


def _numel(x: Any) -> int:
    import torch

    if isinstance(x, torch.Tensor):
        return x.numel()
    if isinstance(x, (list, tuple)):
        return sum(_numel(v) for v in x)
    if isinstance(x, dict):
        return sum(_numel(v) for v in x.values())
    return 0


def _load(src: str) -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": "kernelbench_problem"}
    exec(compile(src, "<problem>", "exec"), ns)
    return ns


def measure(src: str) -> Measure:
    """Sizes of one forward, built and run on the meta device (no memory, no compute)."""
    from tritonforge.problems.workload import run_on_meta

    model, inputs, out, flops = run_on_meta(src)
    params = sum(t.numel() for t in model.parameters()) + sum(b.numel() for b in model.buffers())
    return Measure(_numel(inputs), params, _numel(out), flops)


def _excess(m: Measure, budget: float, flop_budget: float) -> float:
    """log2 of the worst ratio over the budgets; 0 when everything fits."""
    ratios = (m.inputs / budget, m.params / budget, m.outputs / budget, m.flops / flop_budget)
    return max(0.0, max(math.log2(max(r, 1e-12)) for r in ratios))


def _shrink_int(v: int, spec: SizeSpec, factor: float, floor: int) -> int:
    n = max(1, int(v // 2) if factor == 2.0 else round(v / factor))
    if spec.multiple > 1:
        n = max(spec.multiple, n // spec.multiple * spec.multiple)
    elif spec.odd and n % 2 == 0:
        n += 1
    return min(v, max(n, floor))


def shrink(spec: SizeSpec, cur: int | tuple[int, ...], factor: float = 2.0) -> Any:
    """One step smaller (factor 2: a tuple halves only its largest element)."""
    if isinstance(cur, int):
        return _shrink_int(cur, spec, factor, spec.floor)
    orig = spec.value if isinstance(spec.value, tuple) else cur
    idx = [max(range(len(cur)), key=lambda i: cur[i])] if factor == 2.0 else range(len(cur))
    new = list(cur)
    for i in idx:
        new[i] = _shrink_int(cur[i], spec, factor, min(orig[i], 4))
    return tuple(new)


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _changed(specs: dict[str, SizeSpec], assign: dict[str, Any]) -> dict[str, Any]:
    return {n: v for n, v in assign.items() if v != specs[n].value}


def _apply_factor(src: str, specs: dict[str, SizeSpec], factor: float, notes: list[str]):
    """Every size divided by `factor`; gentler factors (halving it) when the result is invalid."""
    f = factor
    while f > 1.0 + 1e-9:
        trial = {n: shrink(s, s.value, f) for n, s in specs.items()}
        try:
            return trial, measure(rewrite_constants(src, _changed(specs, trial)))
        except Exception as exc:
            notes.append(f"factor {f:g} invalid: {_short(exc)}")
            f /= 2
    return {n: s.value for n, s in specs.items()}, None


def _magnitude(v: int | tuple[int, ...]) -> int:
    return max(v) if isinstance(v, tuple) else v


def _moves(specs: dict[str, SizeSpec], assign: dict[str, Any], invalid: set[str]):
    """Each constant alone; groups of constants with equal values halved together; and pairs
    of a constant that cannot shrink alone with each other constant (sizes tied by the model,
    e.g. LayerNorm(out_channels) over a last dim that a stride-2 conv made 2 * W)."""
    groups: dict[int, list[str]] = {}
    for name in specs:
        groups.setdefault(_magnitude(assign[name]), []).append(name)
    yield from ((n,) for n in specs)
    yield from (tuple(g) for g in groups.values() if len(g) > 1)
    for a in sorted(invalid):  # grows while the singles above are tried
        yield from (
            (a, b) for b in specs if b != a and _magnitude(assign[b]) != _magnitude(assign[a])
        )


def _try_move(src, specs, assign, move) -> tuple[dict[str, Any], Measure] | str:
    """Halve the constants of `move`, keeping divisibility (`multiple`) first, then without it."""
    error = "at its floor"
    tried: list[dict[str, Any]] = []
    for keep_multiple in (True, False):
        trial = dict(assign)
        for n in move:
            spec = specs[n] if keep_multiple else specs[n].model_copy(update={"multiple": 1})
            trial[n] = shrink(spec, assign[n])
        if trial == assign or trial in tried:
            continue
        tried.append(trial)
        try:
            return trial, measure(rewrite_constants(src, _changed(specs, trial)))
        except Exception as exc:
            error = f"{ {n: trial[n] for n in move} } invalid ({_short(exc)})"
    return error


def _greedy(src, specs, assign, cur, budget, flop_budget):
    """Apply the best move per step until the excess is 0; returns (assign, measure, error).

    Best = largest drop of the excess per constant halved, in quarter bits; ties go to single
    constants, then to the larger value (so shapes shrink evenly, largest dimension first)."""
    frozen: dict[str, str] = {}
    invalid: set[str] = set()
    while (ex := _excess(cur, budget, flop_budget)) > 0:
        best = None
        for move in _moves(specs, assign, invalid):
            if len(move) == 1 and move[0] in frozen:
                continue
            got = _try_move(src, specs, assign, move)
            if isinstance(got, str):
                if len(move) == 1:
                    frozen[move[0]] = got
                    if got != "at its floor":
                        invalid.add(move[0])
                continue
            trial, m = got
            big = max(_magnitude(assign[n]) for n in move)
            gain = (ex - _excess(m, budget, flop_budget)) / len(move)
            q = max(round(gain * 4) / 4, 0.01 if gain > 1e-6 else 0.0)  # near-equal gains tie
            key = (-q, len(move), -big)
            if best is None or key < best[0]:
                best = (key, trial, m)
        if best is None or -best[0][0] <= 0:
            stuck = ", ".join(f"{k}: {v}" for k, v in frozen.items()) or "none left"
            hint = ""
            if all(v == "at its floor" for v in frozen.values()):
                hint = " (the remaining size is in literals inside the code)"
            return (
                assign,
                cur,
                (
                    f"cannot reach the budget: inputs={cur.inputs} params={cur.params} "
                    f"outputs={cur.outputs} flops={cur.flops} at {_changed(specs, assign)}; "
                    f"constants stuck: {stuck}{hint}"
                ),
            )
        assign, cur = best[1], best[2]
    return assign, cur, None


def validate(src: str) -> float:
    """Build the model and run one forward on CPU with real tensors; returns seconds."""
    import torch

    ns = _load(src)
    torch.manual_seed(0)
    model = ns["Model"](*ns["get_init_inputs"]())
    inputs = ns["get_inputs"]()
    with torch.no_grad():
        t0 = time.perf_counter()
        model(*inputs)
        return time.perf_counter() - t0


def handle(task: dict[str, Any]) -> dict[str, Any]:
    """One scaling task -> reply (see scaling.ScaleResult for the fields' meaning)."""
    src: str = task["src"]
    budget, flop_budget = task.get("budget"), task.get("flop_budget")
    factor = task.get("factor")
    reply: dict[str, Any] = {"ok": False, "reason": "", "assign": {}, "notes": []}
    specs = size_constants(src)
    try:
        before = measure(src)
    except Exception as exc:
        reply["reason"] = f"original does not build/run on the meta device: {_short(exc)}"
        return reply
    reply["before"] = reply["after"] = before._asdict()
    if budget and not factor and _excess(before, budget, flop_budget) == 0:
        return {**reply, "ok": True, "reason": "already within budget"}
    if not specs:
        reply["reason"] = "no module-level size constants (sizes are literals in the code?)"
        return reply
    first_error = ""
    for mult in (1, 4, 16) if budget else (1,):
        assign = {n: s.value for n, s in specs.items()}
        cur: Measure | None = before
        if factor and factor > 1:
            assign, cur = _apply_factor(src, specs, float(factor), reply["notes"])
            cur = cur or before
        error = None
        if budget:
            assign, cur, error = _greedy(src, specs, assign, cur, budget * mult, flop_budget * mult)
        if error:
            reply["reason"] = error
            return reply
        changed = _changed(specs, assign)
        new_src = rewrite_constants(src, changed)
        try:
            seconds = validate(new_src)
        except Exception as exc:
            first_error = first_error or f"scaled problem fails on CPU: {_short(exc)}"
            reply["notes"].append(f"budget x{mult}: {_short(exc)}")
            continue
        why = "scaled" if mult == 1 else f"scaled only to {mult}x the budget ({first_error})"
        reply.update(ok=True, reason=why, assign=changed, after=cur._asdict())
        reply.update(cpu_forward_s=round(seconds, 4), budget_multiplier=mult)
        return reply
    reply["reason"] = first_error
    return reply


_WARM_SRC = """import torch
n = 8
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.randn(n)]
def get_init_inputs():
    return []
"""


def warm_up() -> None:
    """Run one tiny task before saying ready: the first measure/validate imports the flop
    counter, fake tensors and meta kernels (about 2 s of CPU). Paid here, at start-up, it never
    counts against the first task's timeout (a 3-s timeout failed on a loaded machine when the
    task after a worker restart paid for it)."""
    handle({"src": _WARM_SRC, "budget": 4, "flop_budget": 4, "factor": None})


def main() -> int:
    """Serve tasks from stdin until EOF; problem code's own prints go to stderr."""
    import warnings

    reply_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(int(os.environ.get("TRITONFORGE_SCALE_THREADS", "1")))
    warm_up()
    reply_out.write(json.dumps({"ready": True}) + "\n")
    reply_out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        cpu0 = time.process_time()
        try:
            reply = handle(json.loads(line))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # problem code may raise anything, SystemExit included
            reply = {
                "ok": False,
                "reason": f"scaling crashed: {_short(exc)}",
                "traceback": traceback.format_exc()[-2000:],
            }
        reply["task_cpu_s"] = round(time.process_time() - cpu0, 4)
        reply_out.write(json.dumps(reply) + "\n")
        reply_out.flush()
    return 0


# --------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------


class WorkerProcess:
    """One long-lived child serving scaling tasks; replaced after a timeout or a crash."""

    def __init__(self, threads: int = 1) -> None:
        self.threads = threads
        self._proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()

    def _start(self) -> None:
        src_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src_root, env.get("PYTHONPATH")) if p)
        env.update(TRITONFORGE_SCALE_THREADS=str(self.threads), OMP_NUM_THREADS=str(self.threads))
        env.pop("TRITON_INTERPRET", None)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tritonforge.problems.scale_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            env=env,
        )
        self._lines = queue.Queue()
        threading.Thread(target=self._pump, args=(self._proc, self._lines), daemon=True).start()
        try:
            ready = self._lines.get(timeout=STARTUP_TIMEOUT_S)
        except queue.Empty:
            ready = None
        if ready is None:
            self.kill()
            raise RuntimeError("scaling worker did not start (is torch importable?)")

    @staticmethod
    def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def request(self, task: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one task; a reply, or a failure reply (`transient`) on timeout or crash."""
        if self._proc is None or self._proc.poll() is not None:
            try:
                self._start()
            except (RuntimeError, OSError) as exc:
                return {"ok": False, "reason": str(exc), "transient": True}
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(task) + "\n")
            self._proc.stdin.flush()
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            return {"ok": False, "reason": f"timed out after {timeout:g}s", "transient": True}
        except OSError as exc:  # BrokenPipeError: the child died before reading
            self.kill()
            return {"ok": False, "reason": f"worker pipe failed: {exc}", "transient": True}
        if line is None:
            rc = self._proc.wait()
            self._proc = None
            how = f"signal {-rc}" if rc < 0 else f"exit code {rc}"
            return {"ok": False, "reason": f"scaling worker died ({how})", "transient": True}
        return json.loads(line)

    def kill(self) -> None:
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)  # our own child's process group
            except ProcessLookupError:
                pass
            self._proc.wait()
            self._proc = None

    def close(self) -> None:
        if self._proc is None:
            return
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait(timeout=5)
            self._proc = None
        except (subprocess.TimeoutExpired, OSError):
            self.kill()


def cache_path(cache_dir: Path, task: dict[str, Any]) -> Path:
    """Cache file of one task (keyed by source, budgets, factor and SCALER_VERSION)."""
    blob = json.dumps({**task, "v": SCALER_VERSION}, sort_keys=True).encode()
    key = hashlib.sha256(blob).hexdigest()
    return cache_dir / key[:2] / f"{key}.json"


def cache_get(path: Path | None) -> dict[str, Any] | None:
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def cache_put(path: Path | None, reply: dict[str, Any]) -> None:
    if path is None or reply.get("transient"):
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(reply))
        tmp.replace(path)
    except OSError as exc:
        log.debug("scale cache write failed: %s", exc)  # a cache is optional


if __name__ == "__main__":
    sys.exit(main())
