"""Fair timing and memory admission with real sandboxed workers and the real timing process (CPU).

Covers, through `Evaluator.evaluate` on the CPU with `time_on_cpu` (the timing path runs; its
numbers mean nothing here): no worker request of any candidate overlaps a timing (intervals from
the device gate's listener), both sides timed by the same code with an interval in the verdict;
nothing is lost when the timing process dies (restarted, the candidate timed again; a second
death is `judge_fault`); a device out-of-memory error in the candidate's code is
`out_of_resources` with the figure (judged again alone if others held memory meanwhile), never
`crash` (in the worker's own code
outside the candidate's call: tests/unit/test_oom_classify.py);
the judge's own out-of-memory error is retried alone and then reported as the judge's fault;
memory admission serialises what does not fit together and refuses what cannot fit alone.
The judge's out-of-memory errors are injected (the CPU has no device-memory errors to provoke).
"""

from __future__ import annotations

import os
import re
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import helpers.hack_corpus as hc
from tritonforge.evaluation.judge import gpu_timing
from tritonforge.evaluation.judge import replay as replay_module
from tritonforge.evaluation.judge import trials as trials_module
from tritonforge.evaluation.judge.admission import evaluation_bytes
from tritonforge.evaluation.judge.compare import compare_to_reference
from tritonforge.evaluation.judge.device_gate import gate
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.evaluation.judge.replies import TimeReply
from tritonforge.evaluation.sandbox import protocol
from tritonforge.problems import load_suite
from tritonforge.types import Problem, Status, Verdict

pytestmark = pytest.mark.slow

# slow in its device work (ops), not in host Python: what is timed of a candidate is the
# trusted replay of its recorded device work
SLOW_REF = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        for _ in range(40):
            x = torch.relu(x)
        return x

def get_inputs():
    return [torch.randn(512, 512)]

def get_init_inputs():
    return []
"""
OOM_IN_FORWARD = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has "
                                     "a total capacity of 139.81 GiB of which 1.00 GiB is free.")
"""


_settings = hc.cpu_timing_settings


@pytest.fixture(scope="module")
def builtin() -> dict[str, Problem]:
    return {p.name: p for p in load_suite("builtin", size="cpu")}


def _as_candidate(src: str) -> str:
    return re.sub(r"\bModel\b", "ModelNew", src)


def test_no_worker_request_overlaps_a_timing(builtin) -> None:
    names = ["relu", "sigmoid", "tanh", "leaky_relu"]
    spans: list[tuple[str, float, float]] = []
    listener = lambda kind, t0, t1: spans.append((kind, t0, t1))  # noqa: E731
    g = gate("cpu")
    g.listeners.append(listener)
    try:
        with Evaluator(_settings()) as ev, ThreadPoolExecutor(3) as pool:
            verdicts = list(
                pool.map(lambda n: ev.evaluate(builtin[n], builtin[n].solution_src), names)
            )
    finally:
        g.listeners.remove(listener)
    for v in verdicts:
        assert v.status is Status.CORRECT, (v.problem_id, v.status, v.message)
        assert v.runtime is not None and v.ref_runtime is not None and v.speedup is not None
        assert v.timing_clock == "host" and v.speedup_ci is not None
        lo, hi = v.speedup_ci  # a percentile interval of few trials: around the estimate
        assert lo <= hi and lo < 2 * v.speedup and hi > v.speedup / 2
    timings = [(a, b) for k, a, b in spans if k == "exclusive"]
    shared = [(a, b) for k, a, b in spans if k == "shared"]
    assert len(timings) >= len(names) and len(shared) >= 4 * len(names)
    for a, b in timings:
        assert not any(x < b and a < y for x, y in shared), "worker work during a timing"


def test_a_reference_is_not_evicted_between_loading_and_timing(builtin) -> None:
    """Evaluations load their reference under the shared gate and time it under the exclusive
    one; another evaluation's load in between once evicted it ("nothing loaded under ...", a
    judge fault on 20 of 135 KernelBench problems on an H200). One timing slot makes every
    concurrent load an eviction attempt: each must find its own reference still loaded."""
    names = ["relu", "sigmoid", "tanh", "leaky_relu", "gelu", "softplus"]
    with Evaluator(_settings()) as ev, ThreadPoolExecutor(4) as pool:
        timer = ev.resources("cpu").timer
        timer.max_entries = 1
        verdicts = list(pool.map(lambda n: ev.evaluate(builtin[n], builtin[n].solution_src), names))
        assert not timer.pins, "every pin released"
    for v in verdicts:
        assert v.status is Status.CORRECT, (v.problem_id, v.status, v.message)


def _kill_timer_during_timing(ev: Evaluator, times: int, stop: threading.Event) -> None:
    res = ev.resources("cpu")
    killed: set[int] = set()
    while not stop.is_set() and len(killed) < times:
        pid = res.timer.pid
        if res.gate.busy()[1] and pid is not None and pid not in killed:
            time.sleep(0.05)  # inside the rounds
            res.server.kill(pid)
            killed.add(pid)
        time.sleep(0.005)


@pytest.mark.parametrize("deaths", [1, 2])
def test_nothing_is_lost_when_the_timing_process_dies(deaths: int) -> None:
    problem = Problem(id="t/slow", suite="t", name="slow", reference_src=SLOW_REF)
    settings = _settings(mode="hybrid", perf_trials=20, perf_rounds=4)
    stop = threading.Event()
    with Evaluator(settings) as ev:
        killer = threading.Thread(target=_kill_timer_during_timing, args=(ev, deaths, stop))
        killer.start()
        try:
            v = ev.evaluate(problem, _as_candidate(SLOW_REF))
        finally:
            stop.set()
            killer.join(10)
        timer = ev.resources("cpu").timer
        assert (
            timer.deaths == deaths and timer.starts == 2
        )  # a restart after each death but the last of two
    if deaths == 1:
        assert v.status is Status.CORRECT, v.message
        assert v.runtime is not None and v.ref_runtime is not None
        assert any("timing attempt 1" in n and "restarted" in n for n in v.notes)
        # how it ended is named (an RSS watchdog kill was once only "peer closed")
        assert any("it ended: " in n and "SIGKILL" in n for n in v.notes), v.notes
    else:
        assert v.status is Status.JUDGE_FAULT and "died twice" in v.message
        assert not v.correct


SLOW_RELU = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        spin = 0
        while spin < 10_000_000:  # a while of pure Python (`time` is not allowed in candidates)
            spin += 1
        return torch.relu(x)
"""


def test_worker_oom_is_out_of_resources_with_the_figure(builtin) -> None:
    p = builtin["relu"]
    with Evaluator(_settings(mode="hybrid", time_on_cpu=False)) as ev:
        alone = ev.evaluate(p, OOM_IN_FORWARD)
        assert ev.retries["worker_oom"] == 0  # nothing else held memory: the candidate's own
        with ThreadPoolExecutor(2) as pool:
            busy = pool.submit(ev.evaluate, p, SLOW_RELU)
            time.sleep(0.5)  # the slow one holds its reservation while the OOM happens
            crowded = pool.submit(ev.evaluate, p, OOM_IN_FORWARD).result()
            assert busy.result().status is Status.CORRECT
        assert ev.retries["worker_oom"] == 1  # judged again alone before the verdict stood
    for v in (alone, crowded):
        assert v.status is Status.OUT_OF_RESOURCES, (v.status, v.message)
        assert "tried to allocate 3.00 GiB" in v.message
    assert any("judged again alone" in n for n in crowded.notes)
    assert not any("judged again alone" in n for n in alone.notes)


def _oom(*args, **kwargs):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")


def test_judge_oom_is_retried_alone_then_the_judges_fault(builtin, monkeypatch) -> None:
    p = builtin["relu"]
    monkeypatch.setattr(trials_module, "compare_to_reference", _oom)
    with Evaluator(_settings(time_on_cpu=False)) as ev:
        v = ev.evaluate(p, p.solution_src)
        assert ev.retries["judge_oom"] == 1
    assert v.status is Status.JUDGE_FAULT and "8.00 GiB" in v.message
    assert "alone" in v.message and not v.correct

    calls = [0]

    def once(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 1:
            _oom()
        return compare_to_reference(*args, **kwargs)

    monkeypatch.setattr(trials_module, "compare_to_reference", once)
    with Evaluator(_settings(time_on_cpu=False)) as ev:
        v = ev.evaluate(p, p.solution_src)
    assert v.status is Status.CORRECT and any("judged again alone" in n for n in v.notes)


def test_judge_oom_while_copying_outputs_is_not_the_candidates(builtin, monkeypatch) -> None:
    # The H200 run called two honest KernelBench norms `protocol_violation` reward hacks: the
    # judge ran out of device memory copying their 8 GiB outputs, and the protocol's descriptor
    # check took the OOM for a malformed descriptor.
    p = builtin["relu"]
    monkeypatch.setattr(protocol, "copy_windows", _oom)  # the judge's copy of the outputs
    with Evaluator(_settings(time_on_cpu=False)) as ev:
        v = ev.evaluate(p, p.solution_src)
        assert ev.retries["judge_oom"] == 1
    assert v.status is Status.JUDGE_FAULT and v.rule is None, (v.status, v.rule, v.message)
    assert "8.00 GiB" in v.message
    # where the device's bytes were, for the next run to tell what filled it
    note = next(n for n in v.notes if n.startswith("device memory after the first attempt"))
    assert all(k in note for k in ("judge_case_cache", "timer_entries", "reserved_by_evaluations"))


def test_each_retry_reason_gives_one_more_attempt_only(builtin, monkeypatch) -> None:
    # An out-of-memory retry alone that then met a busy machine once got a third attempt (the
    # "too busy" retry hung off the wrong condition).
    oom = Verdict(status=Status.JUDGE_FAULT, message="out of device memory while judging")
    busy = Verdict(status=Status.JUDGE_FAULT, message="the machine was too busy to judge")
    ok = Verdict(status=Status.CORRECT, message="all correctness trials passed")
    for script, want in (([(oom, "judge_oom"), (busy, None)], busy), ([(busy, None)], ok)):
        answers = [*script, (ok, None), (ok, None)]
        calls: list[bool] = []

        def attempt(problem, source, s, alone, answers=answers, calls=calls):
            calls.append(alone)
            v, why = answers[len(calls) - 1]
            return v.model_copy(deep=True), why

        with Evaluator(_settings()) as ev:
            monkeypatch.setattr(ev, "_attempt", attempt)
            v = ev.evaluate(builtin["relu"], builtin["relu"].solution_src)
        assert len(calls) == 2 and v.status is want.status, (calls, v.message)
    assert calls == [False, False]  # a busy machine: once more, not alone


def test_the_judge_holds_one_case_at_a_time(builtin, monkeypatch) -> None:
    # Admission counts one case (inputs, packed copy, expected outputs) per evaluation. The H200
    # run held three at once during the re-check (the last correctness trial's, the timing
    # case and the re-check's): 72.6 GiB in the judge for an 8 GiB-a-side problem, then OOM.
    p = builtin["relu"]
    built: list[weakref.ref] = []
    held: list[int] = []
    with Evaluator(_settings()) as ev:
        ev.refs.max_bytes = 1  # the case cache keeps only the newest case
        real_case = ev.refs.case

        def case(*args, **kwargs):
            c = real_case(*args, **kwargs)
            built.append(weakref.ref(c))
            return c

        def compare(*args, **kwargs):  # what the judge holds outside its cache, at each compare
            cached = {id(c) for c in ev.refs._cases.values()}
            alive = [c for c in (w() for w in built) if c is not None and id(c) not in cached]
            held.append(len(alive))
            del alive
            return compare_to_reference(*args, **kwargs)

        monkeypatch.setattr(ev.refs, "case", case)
        monkeypatch.setattr(trials_module, "compare_to_reference", compare)
        monkeypatch.setattr(gpu_timing, "compare_to_reference", compare)
        monkeypatch.setattr(replay_module, "compare_to_reference", compare)
        v = ev.evaluate(p, p.solution_src)
    assert v.status is Status.CORRECT and v.speedup is not None, v.message
    s = _settings()
    # every trial, every replay, each round's first timed call, the replay after the timing
    assert len(held) == v.trials_total + s.replay_trials + s.perf_rounds + 1, held
    assert max(held) == 0, str(held)  # nothing beyond the case in use (the cache's newest)


def test_problem_that_cannot_fit_alone_is_resource_limit(builtin) -> None:
    p = builtin["relu"]
    with Evaluator(_settings(device_memory_gib=0.0001)) as ev:  # ~107 KB
        v = ev.evaluate(p, p.solution_src)
    assert v.status is Status.RESOURCE_LIMIT and v.phase == "admission"
    assert "needs" in v.message and "of device memory on cpu" in v.message
    assert "inputs 0.00 GiB" in v.message  # the footprint is named


def test_admission_serialises_what_does_not_fit_together(builtin) -> None:
    names = ["relu", "sigmoid", "tanh"]
    with Evaluator(_settings(time_on_cpu=False)) as probe:
        ref = probe.refs.reference(builtin["relu"], "cpu")
        probe.refs.case(ref, 1, "native")
        one = evaluation_bytes(ref.footprint, 0)
    cap_gib = 1.5 * one / (1 << 30)  # one evaluation fits, two do not
    with Evaluator(_settings(time_on_cpu=False, device_memory_gib=cap_gib)) as ev:
        with ThreadPoolExecutor(3) as pool:
            verdicts = list(
                pool.map(lambda n: ev.evaluate(builtin[n], builtin[n].solution_src), names)
            )
        budget = ev.resources("cpu").budget
        assert budget.peak_reserved <= budget.capacity
        assert budget.peak_reserved < 2 * one
    assert all(v.status is Status.CORRECT for v in verdicts), [v.message for v in verdicts]
    waited = [v.phase_seconds.get("admission_wait", 0.0) for v in verdicts]
    assert sum(w > 0 for w in waited) >= 1, waited


def _offer_shared_buffers(monkeypatch) -> list[str]:
    """While the timer offers sharing, send what a GPU judge sends (a descriptor and a
    `shared_inputs` field) with the case's memfd behind it: a CPU process cannot map it.
    Returns the idents of the cases offered."""
    from tritonforge.evaluation.judge import ref_timer
    from tritonforge.evaluation.judge.transport import Parcel

    offered: list[str] = []
    real_carry = ref_timer.RefTimer._carry

    def offer(self, case):
        if self.sharing:
            offered.append(case.ident)
            return Parcel({"shared_inputs": {"nbytes": 8, "size": 8}}, [os.dup(case.fd)])
        return real_carry(self, case)

    monkeypatch.setattr(ref_timer.RefTimer, "_carry", offer)
    return offered


def test_timing_process_loads_each_case_once_and_falls_back_from_a_failed_shared_map(
    builtin, monkeypatch
) -> None:
    """The timing process gets a case's inputs with `ref_load` only, named by the case's ident;
    when it cannot map a shared device buffer (here: a CPU process offered one), the judge sends
    the same load again through the memfd and stops offering shared buffers."""
    offered = _offer_shared_buffers(monkeypatch)
    p = builtin["relu"]
    with Evaluator(_settings()) as ev:
        timer = ev.resources("cpu").timer
        timer.sharing = True
        v = ev.evaluate(p, p.solution_src)
        assert v.status is Status.CORRECT, v.message
        assert v.speedup is not None, v.notes
        assert len(offered) == 1 and timer.sharing is False  # one offer, then memfds
        assert "timer_send" in v.phase_seconds  # (a CPU case's memfd exists already: ~0 s)
        for part in ("timer_build", "timer_inputs", "timer_calls", "cases", "timed_rounds"):
            assert v.phase_seconds.get(part, 0) > 0, (part, v.phase_seconds)
        again = ev.evaluate(p, p.solution_src)  # the same timing case: not loaded again
        assert again.status is Status.CORRECT and "timer_send" not in again.phase_seconds
        assert list(timer.cases.values()) == offered  # the offered case, loaded by memfd


def test_a_reference_reloaded_with_another_case_is_timed_on_its_own_case(builtin) -> None:
    """Two evaluations of one problem whose timing cases are different Case objects (the case
    cache evicted the first and the second built it again): the second's `prepare` reloads the
    reference, still pinned by the first, with its own case. The first's `time` then named a
    case the timing process no longer held, which ended the process (every loaded reference
    lost, the timing retried); now the request carries its case's inputs in place of the
    other's, and the second's timing does the same in turn."""
    p = builtin["relu"]
    with Evaluator(_settings()) as ev:
        timer = ev.resources("cpu").timer
        ref = ev.refs.reference(p, "cpu")
        seed = ev.seed(p, 1000)
        first = ev.refs.case(ref, seed, "native")
        ev.refs.clear()  # evicted, as under memory pressure: the next one is built again
        second = ev.refs.case(ref, seed, "native")
        assert first.ident != second.ident
        key = timer.prepare(ref, first, False, 60.0)
        assert timer.prepare(ref, second, False, 60.0) == key and timer.cases[key] == second.ident
        for case in (first, second, second, first):
            reply = timer.time(key, False, case, (1, 3, 0.0), "host", 60.0)
            assert isinstance(reply, TimeReply) and len(reply.times_ms) == 3  # parsed: ok
            assert timer.cases[key] == case.ident
        assert timer.starts == 1 and timer.deaths == 0, "the timing process never ended"
        timer.release(key)
        timer.release(key)


def test_a_case_resent_with_a_time_request_falls_back_from_a_failed_shared_map(
    builtin, monkeypatch
) -> None:
    """The `time` request that carries its case (another evaluation reloaded the reference) goes
    through the same fallback as a load: a process that cannot map the shared buffer answers
    `shared_error` (it used to raise out of the op and end the process) and gets the memfd."""
    offered = _offer_shared_buffers(monkeypatch)
    p = builtin["relu"]
    with Evaluator(_settings()) as ev:
        timer = ev.resources("cpu").timer
        ref = ev.refs.reference(p, "cpu")
        first = ev.refs.case(ref, ev.seed(p, 1000), "native")
        ev.refs.clear()
        second = ev.refs.case(ref, ev.seed(p, 1000), "native")
        key = timer.prepare(ref, first, False, 60.0)
        timer.prepare(ref, second, False, 60.0)
        timer.sharing = True  # offered again with the first's time request
        reply = timer.time(key, False, first, (1, 3, 0.0), "host", 60.0)
        assert isinstance(reply, TimeReply) and len(reply.times_ms) == 3  # parsed: ok
        assert offered == [first.ident] and timer.sharing is False
        assert timer.cases[key] == first.ident
        assert timer.starts == 1 and timer.deaths == 0, "the timing process never ended"
        timer.release(key)
        timer.release(key)


WEIGHTED_REF = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.register_buffer("shift", torch.randn(n), persistent=False)
{extra}
    def forward(self, x):
        return self.fc(x) + self.shift{use}

def get_inputs():
    return [torch.randn(16, 32)]

def get_init_inputs():
    return [32]
"""


def test_the_timing_process_takes_the_judges_weights_or_builds_what_they_miss(builtin) -> None:
    """A reference's parameters and buffers reach the timing process from the judge (no second
    initialisation: seconds of CPU for KernelBench's large nn.Linear). One whose constructor
    needs data (not possible on the meta device) is built in full there, as before, and so is
    one holding a plain tensor attribute (the judge offers nothing: not counted). All are timed."""
    sources = {
        "judge": WEIGHTED_REF.format(extra="", use=""),
        "built": WEIGHTED_REF.format(
            extra="        self.k = float(self.fc.weight.detach().sum())", use=""
        ),
        "none": WEIGHTED_REF.format(
            extra="        self.mask = torch.rand(n) > 0.5", use=" * self.mask"
        ),
        # a tensor held deeper than the module's attributes: the meta build leaves it on the
        # meta device unseen, the first call fails, and the process builds the model in full
        "built_deep": WEIGHTED_REF.format(
            extra="        self.h = type('H', (), {})()\n        self.h.t = torch.ones(n)",
            use=" * self.h.t",
        ),
    }
    with Evaluator(_settings()) as ev:
        timer = ev.resources("cpu").timer
        for how, src in sources.items():
            p = Problem(id=f"t/weights_{how}", suite="t", name=f"weights_{how}", reference_src=src)
            ref = ev.refs.reference(p, "cpu")
            case = ev.refs.case(ref, ev.seed(p, 1000), "native")
            key = timer.prepare(ref, case, False, 60.0)
            reply = timer.time(key, False, case, (1, 3, 0.0), "host", 60.0)
            assert isinstance(reply, TimeReply) and len(reply.times_ms) == 3  # parsed: ok
            timer.release(key)
        assert timer.starts == 1 and timer.deaths == 0
        assert ev.device_stats()["cpu"]["timer_weights"] == {"judge": 1, "built": 2}


def test_the_timing_process_descriptors_are_closed_when_it_cannot_start(builtin, monkeypatch):
    """A load whose timing process cannot be started closes what it would have sent (the
    weights' and inputs' descriptors: on a GPU, exported device memory lives while one is open)."""
    from tritonforge.evaluation.judge import ref_timer

    def no_process(self):
        raise ref_timer.TimerDied("the reference timing process did not start: (test)")

    with Evaluator(_settings()) as ev:
        timer = ev.resources("cpu").timer
        ref = ev.refs.reference(builtin["relu"], "cpu")
        case = ev.refs.case(ref, 1, "native")
        monkeypatch.setattr(ref_timer.RefTimer, "_ensure", no_process)
        before = set(os.listdir("/proc/self/fd"))
        with pytest.raises(ref_timer.TimerDied):
            timer.prepare(ref, case, False, 10.0)
        assert set(os.listdir("/proc/self/fd")) <= before


def test_timed_calls_get_heavy_inputs_that_the_trials_check(builtin, monkeypatch) -> None:
    # a kernel may tell the draws apart and take a shortcut on native inputs only (a subsample
    # within a loose tolerance: attacks_open/r2_native_subsample_mse.py): timing is on heavy
    p = builtin["relu"]
    made: list[tuple[int, str]] = []
    with Evaluator(_settings()) as ev:
        real_case = ev.refs.case

        def case(ref, seed, dist, *args, **kwargs):
            made.append((seed, dist))
            return real_case(ref, seed, dist, *args, **kwargs)

        monkeypatch.setattr(ev.refs, "case", case)
        v = ev.evaluate(p, p.solution_src)
        timing_seed = ev.seed(p, 1000)
    assert v.status is Status.CORRECT and v.speedup is not None, v.message
    assert [d for seed, d in made if seed == timing_seed] == ["heavy"]
    s = _settings()
    assert gpu_timing.timed_distribution(s) == "heavy" and "heavy" in s.distributions
    s.distributions = ["native", "scaled"]  # a configuration without heavy: a checked draw
    assert gpu_timing.timed_distribution(s) == "native"
