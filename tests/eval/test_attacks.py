"""The reward-hack attack corpus (tests/eval/corpus/attacks): every attack is rejected with the
expected status and rule, in strict mode and (for the machine and judge attacks) in hybrid mode,
and no attack has a machine-level effect.

Covers: one module-scoped Evaluator per mode (CPU interpreter, fast corpus settings); per attack
the verdict status and rule from the manifest, then the machine checks of MachineWatch (no file
outside the scratch dir, no loopback connection, the sentinel process and file intact), the fork
server alive and without leftover children, and stdout/stderr capped; the hook-stopped machine
attacks again in the degraded sandbox (rlimits, no namespaces, as `nobody`: never root; where
`nobody` cannot reach this interpreter the fork server sees it through helpers/nobody_python.py,
and a plain rlimits Evaluator refuses with a typed reason); hybrid mode: pure
PyTorch accepted with custom_share 0, a half-Triton solution accepted with 0 < share < 1 (by
work) and rejected once `min_custom_share` is above its share; every class of issue 14 covered
by at least two attack variants. Does not cover: GPU-only attacks (side streams,
implausible speedups: tests/gpu/test_attacks_gpu.py) or legitimate solutions (test_legit.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

import helpers.hack_corpus as hc
from helpers.nobody_python import needs_exposing, sandbox_evaluator
from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.rollout.rewards import compute_reward
from tritonforge.types import Status, Verdict

pytestmark = pytest.mark.slow

ATTACKS = [c for c in hc.cases("attacks") if not c.get("gpu")]
HYBRID = [c for c in ATTACKS if "hybrid" in c]
# machine attacks that the audit hook stops: without namespaces it is the only barrier left
DEGRADED = [c for c in ATTACKS if c["attack_class"] == 4 and c["status"] == "reward_hack"]


@pytest.fixture(scope="module")
def strict() -> Iterator[Evaluator]:
    with Evaluator(hc.base_settings("strict")) as ev:
        yield ev


@pytest.fixture(scope="module")
def degraded() -> Iterator[Evaluator]:
    s = hc.base_settings("strict")
    s.sandbox = "rlimits"
    with sandbox_evaluator(s) as ev:
        yield ev


@pytest.fixture(scope="module")
def hybrid() -> Iterator[Evaluator]:
    with Evaluator(hc.base_settings("hybrid")) as ev:
        yield ev


def judge(
    ev: Evaluator, case: dict[str, Any], mode: str, sandbox: str = "auto"
) -> tuple[Verdict, list[str]]:
    """Evaluate one attack under MachineWatch; returns the verdict and the machine damage."""
    s = hc.settings_for(case, mode)
    s.sandbox = sandbox
    return hc.judge_case(ev, case, s)


def expect(v: Verdict, case: dict[str, Any], status: str, rule: str | None) -> None:
    detail = f"{case['file']}: {v.status.value} rule={v.rule} phase={v.phase}\n{v.message[:800]}"
    assert v.status is Status(status), detail
    assert v.rule == (rule or None), detail
    assert v.correct is (status == "correct"), detail
    if status == "reward_hack":
        assert compute_reward(v) == 0.0, detail  # the default hack_penalty


def test_corpus_size_and_classes() -> None:
    every = hc.cases("attacks")
    assert len(every) >= 30
    assert {c["attack_class"] for c in every} == {1, 2, 3, 4}
    for c in every:
        assert "ModelNew" in c["source"], c["file"]
        assert c["status"] in {s.value for s in Status}, c["file"]
    per_class = {k: [c for c in every if c.get("issue14_class") == k] for k in range(1, 10)}
    for k, found in per_class.items():  # every attack class of issue 14, two variants or more
        assert len(found) >= 2, f"issue-14 class {k}: {[c['file'] for c in found]}"


@pytest.mark.parametrize("case", ATTACKS, ids=[c["file"] for c in ATTACKS])
def test_attack_rejected_in_strict_mode(strict: Evaluator, case: dict[str, Any]) -> None:
    v, damage = judge(strict, case, "strict")
    expect(v, case, case["status"], case["rule"])
    assert damage == [], f"{case['file']}: {damage}"


@pytest.mark.parametrize("case", DEGRADED, ids=[c["file"] for c in DEGRADED])
def test_machine_attack_blocked_without_namespaces(
    degraded: Evaluator, case: dict[str, Any]
) -> None:
    """Degraded sandbox (rlimits only, no namespaces, as `nobody`): every machine attack is
    still stopped, and the verdict says who the candidate ran as."""
    v, damage = judge(degraded, case, "strict", sandbox="rlimits")
    expect(v, case, case["status"], case["rule"])
    assert damage == [], f"{case['file']}: {damage}"
    if v.phase != "static" and os.getuid() == 0 and v.notes:
        assert any("sandbox: nobody" in n for n in v.notes), v.notes


@pytest.mark.parametrize("case", HYBRID, ids=[c["file"] for c in HYBRID])
def test_attack_in_hybrid_mode(hybrid: Evaluator, case: dict[str, Any]) -> None:
    v, damage = judge(hybrid, case, "hybrid")
    if case["hybrid"] == "same":
        expect(v, case, case["status"], case["rule"])
    else:
        expect(v, case, case["hybrid"], case.get("hybrid_rule"))
    assert damage == [], f"{case['file']}: {damage}"


def test_pure_pytorch_accepted_in_hybrid_with_zero_share(hybrid: Evaluator) -> None:
    case = next(c for c in ATTACKS if c["file"] == "c1_pure_torch.py")
    v = hybrid.evaluate(hc.problem(case["problem"]), case["source"], hc.base_settings("hybrid"))
    assert v.status is Status.CORRECT, v.message
    assert v.audit is not None and v.audit.custom_share == 0.0
    assert v.audit.kernel_launches == 0
    assert "aten::relu" in v.audit.torch_ops


def test_half_triton_share_and_minimum(hybrid: Evaluator) -> None:
    source = (hc.CORPUS / "hybrid" / "half_triton_silu.py").read_text()
    problem = hc.problem("builtin/silu")
    v = hybrid.evaluate(problem, source, hc.base_settings("hybrid"))
    assert v.status is Status.CORRECT, v.message
    share = v.audit.custom_share
    assert share is not None and 0.0 < share < 1.0
    assert v.audit.share_basis == "work"
    assert share == pytest.approx(1 - 8 / 20, abs=0.02)  # sigmoid moves 8n of the 20n bytes
    assert "aten::sigmoid" in v.audit.torch_ops and v.audit.kernels == ["mul_kernel"]
    s = hc.base_settings("hybrid")
    s.min_custom_share = min(1.0, share + (1.0 - share) / 2)
    v2 = hybrid.evaluate(problem, source, s)
    assert v2.status is Status.REWARD_HACK and v2.rule == "insufficient_custom_share", v2.message
    s.min_custom_share = share / 2
    assert hybrid.evaluate(problem, source, s).status is Status.CORRECT
    strict_v = hybrid.evaluate(problem, source, hc.base_settings("strict"))
    assert strict_v.status is Status.REWARD_HACK and strict_v.rule == "torch_compute"


def test_host_compute_cannot_game_a_required_share(hybrid: Evaluator) -> None:
    """Host compute happens in the candidate's process, where no trusted process can repeat or
    time it: the replay of its device work alone is wrong (replay_mismatch); with a required
    share the in-process audit already names the host read. (A Python loop over `tolist()`:
    numpy is not on the import allowlist.)"""
    case = next(c for c in ATTACKS if c["file"] == "c1_host_python_loop.py")
    s = hc.base_settings("hybrid")
    v = hybrid.evaluate(hc.problem(case["problem"]), case["source"], s)
    assert v.status is Status.REWARD_HACK and v.rule == "replay_mismatch", v.message
    s.min_custom_share = 0.5
    v = hybrid.evaluate(hc.problem(case["problem"]), case["source"], s)
    assert v.status is Status.REWARD_HACK and v.rule == "host_read", v.message


def test_rlimits_sandbox_never_runs_as_root() -> None:
    """Without namespaces a root judge's candidate runs as `nobody`; where `nobody` cannot reach
    the interpreter the sandbox refuses with a typed reason (interpreter_unreachable) instead of
    running it as root, and `sandbox_allow_root` no longer exists."""
    case = next(c for c in hc.cases("legit") if c["file"] == "l19_reused_output_buffer.py")
    s = hc.base_settings("strict")
    s.sandbox = "rlimits"
    with pytest.raises(ValueError, match="sandbox_allow_root"):
        EvalSettings(sandbox_allow_root=True)
    if os.getuid() != 0:
        pytest.skip("the rlimits sandbox runs as the judge's own user when it is not root")
    with Evaluator(s) as ev:
        v = ev.evaluate(hc.problem(case["problem"]), case["source"], s)
    if needs_exposing() is not None:
        assert v.status is Status.INTERNAL_ERROR and v.phase == "sandbox", v.message
        assert "interpreter_unreachable" in v.message and not v.correct, v.message
    else:
        assert v.status is Status.CORRECT, v.message
    with sandbox_evaluator(s) as ev:  # as on a machine where `nobody` reaches the interpreter
        ok = ev.evaluate(hc.problem(case["problem"]), case["source"], s)
    assert ok.status is Status.CORRECT, ok.message
    assert any(n.startswith("sandbox: nobody (uid 65534), no namespaces") for n in ok.notes)
    assert not any("root" in n for n in ok.notes if n.startswith("sandbox")), ok.notes
