"""The OS layer alone holds: the round-3 machine attacks (corpus/attacks/t4_*.py, raw routes:
`os` directly, ctypes, libc syscalls) with the Python layer switched off.

"Python layer off" (the `python_layer_off` fixture): the judge's static rules pass everything,
the worker arms neither the audit hook nor the guarded import (`"python_layer": false` in the
spawn spec, honoured by sandbox/zygote.py; only tests set it) and the judge skips the audit's
integrity check. What is left is the OS layer: namespaces or not, `nobody`, seccomp, Landlock,
rlimits, per-worker cgroups, the subreaper fork server and its watchdog, non-dumpable judge and
fork server. Each case runs in the namespace sandbox and in the rlimits sandbox (as `nobody`; see
helpers/nobody_python.py), the daemon and memory cases also without cgroups
(TRITONFORGE_CGROUPS=0: the child subreaper and the watchdog alone). Per case: the manifest's
`os_status`, and no machine damage (MachineWatch: files outside scratch, loopback and abstract
socket connections, the sentinel, processes named after the marker after the verdict, the fork
server alive with nothing left under it, no `TF-LEAK` line). Does not cover: the same attacks
with every layer on (test_attacks.py), GPU device nodes (tests/gpu).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

import helpers.hack_corpus as hc
from helpers.nobody_python import sandbox_evaluator
from tritonforge.evaluation.judge import evaluator as evaluator_mod
from tritonforge.evaluation.judge import phases as phases_mod
from tritonforge.evaluation.judge import trials as trials_mod
from tritonforge.evaluation.judge.checks import StaticResult
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.types import Status

pytestmark = pytest.mark.slow

CASES = [c for c in hc.cases("attacks") if "os_status" in c]
FALLBACK = [
    c
    for c in CASES
    if not c.get("os_needs_cgroup") and ("daemon" in c["file"] or "memfd" in c["file"])
]
SANDBOXES = ("namespaces", "rlimits")


@pytest.fixture
def python_layer_off(monkeypatch: pytest.MonkeyPatch) -> None:
    spec_of = phases_mod.worker_spec
    monkeypatch.setattr(evaluator_mod, "run_static", lambda *a, **k: StaticResult(None, None, ""))
    monkeypatch.setattr(trials_mod, "check_integrity", lambda *a, **k: None)
    monkeypatch.setattr(
        phases_mod, "worker_spec", lambda *a, **k: {**spec_of(*a, **k), "python_layer": False}
    )


def _evaluators(cgroups: bool) -> Iterator[dict[str, Evaluator]]:
    env = {} if cgroups else {"TRITONFORGE_CGROUPS": "0"}
    out: dict[str, Evaluator] = {}
    ns, rl = hc.base_settings("strict"), hc.base_settings("strict")
    ns.sandbox, rl.sandbox = "namespaces", "rlimits"
    with sandbox_evaluator(ns, env) as a, sandbox_evaluator(rl, env) as b:
        out["namespaces"], out["rlimits"] = a, b
        for ev in out.values():
            ev.server("cpu")  # started now: its ready message says whether cgroups are used
        yield out


@pytest.fixture(scope="module")
def with_cgroups() -> Iterator[dict[str, Evaluator]]:
    yield from _evaluators(True)


@pytest.fixture(scope="module")
def without_cgroups() -> Iterator[dict[str, Evaluator]]:
    yield from _evaluators(False)


def _cgroups(ev: Evaluator) -> bool:
    return not str(ev.started()["cpu"].server.info.get("cgroups", "none")).startswith("none")


def _check(ev: Evaluator, case: dict[str, Any], sandbox: str) -> None:
    s = hc.settings_for(case, "strict")
    s.sandbox = sandbox
    v, damage = hc.judge_case(ev, case, s)
    detail = f"{case['file']} ({sandbox}): {v.status.value} {v.phase} {v.message[:600]}"
    assert v.status is Status(case["os_status"]), detail
    assert damage == [], f"{detail}\n{damage}"
    note = next((n for n in v.notes if n.startswith("sandbox: ")), None)
    if note is not None:  # the worker answered its load request
        assert ("no namespaces" in note) is (sandbox == "rlimits"), v.notes
        assert note.startswith("sandbox: nobody") or os.getuid() != 0, v.notes


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_os_layer_holds_alone(
    python_layer_off: None, with_cgroups: dict[str, Evaluator], case: dict[str, Any], sandbox: str
) -> None:
    if case.get("os_needs_cgroup") and not _cgroups(with_cgroups[sandbox]):
        pytest.skip("no per-worker cgroups here")
    _check(with_cgroups[sandbox], case, sandbox)


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("case", FALLBACK, ids=[c["file"] for c in FALLBACK])
def test_os_layer_without_cgroups(
    python_layer_off: None,
    without_cgroups: dict[str, Evaluator],
    case: dict[str, Any],
    sandbox: str,
) -> None:
    """The child subreaper kills the daemon, the watchdog counts the memfd pages."""
    assert not _cgroups(without_cgroups[sandbox])
    _check(without_cgroups[sandbox], case, sandbox)
