"""Trusted decisions on worker reports (evaluation/judge/decide.py) and the audit hook's event rules
(evaluation/sandbox/audit_hook.py), on hand-made facts.

Covers: the order of decide_audit's rules, strict vs hybrid, the caching check (stale outputs,
provenance failures on the repeated call), the hybrid minimum share, audit_switches, the
post-timing rule (changed_after_timing); which interpreter events map to which rule and when
they are allowed for a given origin (filesystem paths inside/outside scratch, frames handed out
by stdlib helpers, imports).
Does not cover: collecting the facts in a real worker (tests/eval/test_attacks.py).
"""

from __future__ import annotations

import pytest

from helpers.replies import audit_facts, trial_facts
from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge import decide
from tritonforge.evaluation.judge.replies import Integrity
from tritonforge.evaluation.sandbox import audit_hook
from tritonforge.evaluation.sandbox.audit_hook import Origin
from tritonforge.evaluation.sandbox.audit_state import STATE, Armed
from tritonforge.evaluation.sandbox.glue import glue_digest
from tritonforge.types import Problem, Status, Verdict

CLEAN = {"launches": 2, "launches_ok": 2, "snapshotted": 2, "wrote_any": True, "ops": {}}
WRITTEN = {"numel": 10, "launched_on": True, "from_kernel": True}


def run(audit=None, facts=None, mode="strict", unsolicited=False, **kw):
    s = EvalSettings(mode=mode, **kw)
    return decide.decide_audit(
        audit_facts({**CLEAN, **(audit or {})}),
        trial_facts({"provenance": [WRITTEN], **(facts or {})}),
        s,
        unsolicited,
    )


def rule(*args, **kw):
    hit = run(*args, **kw)
    return hit[0] if hit else None


def test_clean_trial_passes_both_modes() -> None:
    assert run() is None
    assert run(mode="hybrid") is None


def test_rule_order_and_names() -> None:
    assert rule(unsolicited=True) == "protocol_violation"
    assert rule({"violations": ["network: socket.connect", "host_read: x"]}) == "network"
    assert rule(facts={"aliased": [0]}) == "output_aliases_input"
    assert rule(facts={"stale": [0]}) == "cached_result"
    assert rule({"ops": {"aten::relu": 1}}) == "torch_compute"
    assert rule({"launches_ok": 0}) == "no_kernel_launch"
    not_passed = {"numel": 4, "launched_on": False, "from_kernel": False}
    assert rule(facts={"provenance": [not_passed]}) == "output_not_from_kernel"
    unchanged = {"numel": 4, "launched_on": True, "from_kernel": False}
    hit = run(facts={"provenance": [unchanged]})
    assert hit[0] == "output_not_from_kernel" and "no kernel changed it" in hit[1]
    untracked = {"numel": 4, "launched_on": True, "from_kernel": None}
    assert rule({"wrote_any": False}, facts={"provenance": [untracked]}) == "decoy_launch"
    assert rule({"wrote_any": False}) is None  # lineage credits the output (autotune runs)
    assert rule(facts={"expanded": [0]}) == "broadcast_output"


def test_untracked_or_empty_outputs_are_not_judged() -> None:
    assert (
        rule(facts={"provenance": [{"numel": 4, "launched_on": False, "from_kernel": None}]})
        is None
    )
    assert (
        rule(facts={"provenance": [{"numel": 0, "launched_on": False, "from_kernel": False}]})
        is None
    )


def test_repeat_call_turns_provenance_failures_into_cached_result() -> None:
    unchanged = {"numel": 4, "launched_on": False, "from_kernel": False}
    hit = run(facts={"provenance": [unchanged], "repeat": True})
    assert hit[0] == "cached_result" and "second call" in hit[1]
    assert rule({"launches_ok": 0}, facts={"repeat": True}) == "cached_result"
    assert rule({"ops": {"aten::add": 1}}, facts={"repeat": True}) == "torch_compute"


def test_hybrid_tolerates_compute_and_host_reads_but_not_the_rest() -> None:
    assert rule({"ops": {"aten::relu": 1}, "launches_ok": 0}, mode="hybrid") is None
    assert rule({"violations": ["host_read: Tensor.numpy"]}, mode="hybrid") is None
    assert rule({"violations": ["host_read: Tensor.numpy"]}) == "host_read"
    host = {"violations": ["host_read: Tensor.numpy"], "custom_share": 1.0}
    assert rule(host, mode="hybrid", min_custom_share=0.5) == "host_read"  # would game the share
    assert rule({"violations": ["judge_tamper: x"]}, mode="hybrid") == "judge_tamper"
    assert rule(facts={"aliased": [0]}, mode="hybrid") == "output_aliases_input"
    assert rule(facts={"stale": [1]}, mode="hybrid") == "cached_result"
    assert rule(facts={"expanded": [0]}, mode="hybrid") is None


def test_hybrid_minimum_share() -> None:
    assert rule({"custom_share": 0.4}, mode="hybrid", min_custom_share=0.5) == (
        "insufficient_custom_share"
    )
    assert rule({"custom_share": 0.6}, mode="hybrid", min_custom_share=0.5) is None
    assert rule({"custom_share": None}, mode="hybrid", min_custom_share=0.1) == (
        "insufficient_custom_share"
    )


def test_audit_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    assert decide.audit_switches() == {"profile": True, "snapshot": True, "repeat": False}
    assert decide.audit_switches(last_trial=True)["repeat"] is True
    monkeypatch.setattr(decide, "IN_PROCESS_AUDIT", False)
    off = {"profile": False, "snapshot": False, "repeat": False}
    assert decide.audit_switches(last_trial=True) == off


# ---- audit hook rules --------------------------------------------------------------------------

CAND = Origin(True, "candidate", "library", "candidate", "")


@pytest.mark.parametrize(
    ("event", "args", "expected"),
    [
        ("socket.connect", (None, ("127.0.0.1", 1)), "network"),
        ("os.fork", (), "process_spawn"),
        ("os.kill", (1, 9), "signal_process"),
        ("ctypes.dlopen", ("libc",), "native_code"),
        ("sys._getframe", (None,), "introspection"),
        ("gc.get_objects", (-1,), "introspection"),
        ("object.__getattr__", (None, "tb_frame"), "introspection"),
        ("object.__getattr__", (None, "shape"), None),
        ("exec", (None,), "dynamic_code"),
        ("open", ("/x", "w", 0), "filesystem"),
        ("os.rename", ("/a", "/b"), "filesystem"),
        ("import", ("socket",), "forbidden_import"),
        ("import", ("json",), None),
        ("os.listdir", ("/",), None),
    ],
)
def test_event_rules(event: str, args: tuple, expected: str | None) -> None:
    assert audit_hook.rule_for(event, args) == expected


def _hook(scratch: str = "/nonexistent-scratch") -> audit_hook.Hook:
    """An armed hook object, never installed (its decisions only)."""
    hook = audit_hook.Hook(stub_codes=())
    hook.arm(Armed("/nonexistent/candidate.py", scratch, ("triton",), True))
    return hook


def test_filesystem_allows_scratch_only(tmp_path) -> None:
    hook = _hook(str(tmp_path))
    ok = ("open", (str(tmp_path / "a.txt"), "w", 0))
    assert hook.allowed("filesystem", *ok, CAND)
    assert not hook.allowed("filesystem", "open", ("/etc/passwd", "a", 0), CAND)
    assert hook.allowed("filesystem", "open", ("/etc/passwd", "r", 0), CAND)
    assert not hook.allowed("filesystem", "open", ("/proc/self/mem", "r", 0), CAND)
    assert not hook.allowed("filesystem", "os.remove", ("/tmp/x", None), CAND)
    assert not hook.allowed(
        "filesystem", "os.rename", (str(tmp_path / "a"), "/tmp/b", None, None), CAND
    )
    library = Origin(True, "library", "library", "library", "")
    assert hook.allowed("filesystem", "open", ("/etc/x", "w", 0), library)


def test_frames_handed_out_by_stdlib_are_blocked() -> None:
    hook = _hook()
    direct = Origin(True, "candidate", "candidate", "candidate", "")
    via_traceback = Origin(True, "stdlib", "candidate", "candidate", "traceback")
    via_formatter = Origin(True, "stdlib", "candidate", "candidate", "string")
    via_namedtuple = Origin(True, "stdlib", "candidate", "candidate", "collections")
    inside_logging = Origin(True, "stdlib", "stdlib", "candidate", "logging")
    inside_triton = Origin(True, "triton", "triton", "triton", "")
    for o, ok in [
        (direct, False),
        (via_traceback, False),
        (via_formatter, False),  # string.Formatter().get_field("0.tb_frame", ...)
        (via_namedtuple, True),
        (inside_logging, True),
        (inside_triton, True),
    ]:
        assert hook.allowed("introspection", "sys._getframe", (None,), o) is ok, o
    assert not hook.allowed("introspection", "gc.get_objects", (-1,), via_namedtuple)
    assert hook.allowed("introspection", "gc.get_objects", (-1,), inside_triton)


def test_spawn_native_import_network_threads() -> None:
    hook = _hook()
    triton = Origin(True, "stdlib", "stdlib", "triton", "subprocess")
    assert hook.allowed("process_spawn", "subprocess.Popen", (), triton)
    assert not hook.allowed("process_spawn", "os.fork", (), CAND)
    assert hook.allowed("native_code", "ctypes.dlopen", (), triton)
    assert not hook.allowed("native_code", "ctypes.dlopen", (), CAND)
    assert not hook.allowed("forbidden_import", "import", ("socket",), CAND)
    assert not hook.allowed("network", "socket.connect", (), triton)
    assert audit_hook.rule_for("_thread.start_new_thread", (None, ())) == "background_thread"
    assert not hook.allowed("background_thread", "_thread.start_new_thread", (), triton)
    code_write = ("object.__setattr__", (None, "__code__", None))
    assert audit_hook.rule_for(*code_write) == "introspection"
    assert not hook.allowed("introspection", *code_write, CAND)


def test_hook_arms_once() -> None:
    hook = _hook()
    with pytest.raises(RuntimeError, match="once"):
        hook.arm(Armed("/x", "/y"))


def test_import_guard_blocks_forbidden_roots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(STATE, "violations", [])
    hook, guard = _hook(), audit_hook._BUILTIN["tritonforge.import"]

    def imp(name: str, level: int = 0):
        box: list = []
        guard(hook, (0, name, level, box), None)
        return box[0](name, None, None, (), level)

    assert imp("math").__name__ == "math"
    for name in ("socket", "tritonforge.evaluation.sandbox.audit", "posix", "ctypes.util", "pydoc"):
        with pytest.raises(ImportError, match="blocked"):
            imp(name)
    with pytest.raises(ImportError, match="relative"):
        imp("x", 1)
    assert STATE.violations[0].startswith("forbidden_import: import of socket")


def test_changed_after_timing_names_the_rule_and_the_failure() -> None:
    # Regression (H200, 2026-12-02): a per-tensor cache that returned stale outputs only inside
    # the timing loop came back as a plain numerical_mismatch instead of a reward hack.
    rule, message = decide.changed_after_timing(
        Status.NUMERICAL_MISMATCH, "output 0: 12/100 elements differ"
    )
    assert rule == "changed_after_timing"
    assert "numerical_mismatch: output 0: 12/100 elements differ" in message
    assert "state kept across calls" in message


def test_cuda_backend_is_not_held_to_triton_launch_rules() -> None:
    # Regression: the launch recorder and the lineage only see Triton launches, so a correct
    # CUDA C++ (load_inline) candidate looked like "no kernel wrote the output".
    untracked = {"numel": 4, "launched_on": False, "from_kernel": False}
    facts = {"provenance": [untracked]}
    assert rule({"launches_ok": 0}, facts=facts) == "no_kernel_launch"
    assert rule({"launches_ok": 0}, facts=facts, backend="cuda") is None
    # the rules that do not depend on Triton launches still hold for the CUDA backend
    assert rule({"ops": {"aten::relu": 1}}, backend="cuda") == "torch_compute"
    assert rule(facts={"expanded": [0]}, backend="cuda") == "broadcast_output"
    assert rule(facts={"stale": [0]}, backend="cuda") == "cached_result"


# ---- issue 14: signatures, integrity, the judge's own glue list ---------------------------------


def test_caching_check_compares_launch_signatures() -> None:
    s = EvalSettings()
    fresh = "sig-fresh"
    same = {"repeat": True, "first_signature": fresh, "signature": fresh, "provenance": [WRITTEN]}
    assert decide.decide_audit(audit_facts(CLEAN), trial_facts(same), s, False, [fresh]) is None
    replay = {**same, "signature": "sig-copy", "signature_lines": ["copy|(4,)||-,out0"]}
    hit = decide.decide_audit(audit_facts(CLEAN), trial_facts(replay), s, False, [fresh])
    assert hit[0] == "cached_result" and "copy|(4,)" in hit[1]
    unprofiled = {**same, "first_signature": "sig-torch"}  # the light call alone differed
    assert (
        decide.decide_audit(audit_facts(CLEAN), trial_facts(unprofiled), s, False, [fresh])[0]
        == "launch_mismatch"
    )
    # the first trial's calls may do one-off work (autotune, a weight layout): not compared
    assert decide.decide_audit(audit_facts(CLEAN), trial_facts(replay), s, False, None) is None
    hybrid = EvalSettings(mode="hybrid")
    assert (
        decide.decide_audit(audit_facts(CLEAN), trial_facts(replay), hybrid, False, [fresh])[0]
        == "cached_result"
    )


def test_timed_calls_must_match_the_profiled_signature() -> None:
    s = EvalSettings()
    v = Verdict(status=Status.CORRECT)
    records = [audit_facts({"launches": 1})]
    problem = Problem(id="p", suite="s", name="p", reference_src="")
    ok = decide.decide_timing(
        v, [1, 1], records, True, problem, 0, s, signatures=["a", "a"], history=["a", "a"]
    )
    assert ok is None
    odd = decide.decide_timing(
        v, [1, 1], records, True, problem, 0, s, signatures=["a", "b"], history=["a", "a"]
    )
    assert odd[0] == "launch_mismatch" and "1 of 2" in odd[1]
    # profiled trials that disagree among themselves (data-dependent launches): not compared
    assert decide.stable_signature(["a", "b"]) is None and decide.stable_signature([]) is None
    unstable = decide.decide_timing(
        v, [1], records, True, problem, 0, s, signatures=["b"], history=["a", "b"]
    )
    assert unstable is None


def test_integrity_and_reclassified_ops() -> None:
    armed = "/tmp/scratch/candidate.py|/tmp/scratch|triton|True"
    good = Integrity(armed, glue_digest())
    assert decide.check_integrity(armed, good) is None
    assert decide.check_integrity(armed, Integrity("", glue_digest()))
    assert decide.check_integrity(armed, Integrity(armed, "widened"))
    assert decide.check_integrity(armed, Integrity())[0] == "judge_tamper"
    assert decide.check_integrity("", good)[0] == "judge_tamper"  # never armed at load
    audit = {**CLEAN, "glue": {"aten::relu": 2, "aten::view": 1}, "ops": {}}
    assert rule(audit) == "torch_compute"  # the worker's glue list said relu is glue
    moved = decide.reclassify(audit_facts(audit))
    assert moved.ops == {"aten::relu": 2} and moved.glue == {"aten::view": 1}
