"""Feedback text built from verdicts: errors kept (trimmed), numbers shown, deterministic, capped."""

from __future__ import annotations

from tritonforge.rollout.feedback import (
    ALLOWED_INSTEAD,
    STATUS_TEXT,
    FeedbackConfig,
    build_feedback,
    trim_text,
)
from tritonforge.types import Audit, Mismatch, Status, Timing, Verdict

COMPILER_MSG = (
    "triton.compiler.errors.CompilationError: at 14:12: arange's range must be a power of 2"
)


def _traceback(n_frames: int = 60) -> str:
    lines = ["Traceback (most recent call last):"]
    for i in range(n_frames):
        lines.append(
            f'  File "/usr/lib/python3/site-packages/triton/runtime/jit.py", line {100 + i}, in run'
        )
        lines.append(f"    kernel = self.compile(src, target=target, options=options.{i})")
        if i == 30:
            lines.append('  File "/tmp/sandbox/candidate.py", line 42, in forward')
            lines.append("    relu_kernel[grid](x, out, n, BLOCK_SIZE=1000)")
    lines.append(COMPILER_MSG)
    return "\n".join(lines)


def test_compile_error_keeps_compiler_message_and_candidate_frame() -> None:
    v = Verdict(status=Status.COMPILE_ERROR, phase="compile", message=_traceback(), device="cuda")
    cfg = FeedbackConfig(max_chars=3000, error_chars=1500)
    text = build_feedback(v, cfg)
    assert text.startswith(
        "Evaluation result: compile_error (phase: compile). Your Triton kernel failed to compile."
    )
    assert COMPILER_MSG in text  # the tail with the compiler's message survives trimming
    assert (
        'File "/tmp/sandbox/candidate.py", line 42, in forward' in text
    )  # frame in the candidate file
    assert "BLOCK_SIZE=1000" in text  # and its source line
    assert "lines omitted" in text
    assert "Traceback (most recent call last):" in text  # head kept
    assert "What to fix next:" in text and "power-of-two tl.arange" in text
    assert text.endswith(cfg.closing)
    assert len(text) <= 3000


def test_stderr_added_when_not_in_message() -> None:
    v = Verdict(
        status=Status.RUNTIME_ERROR,
        message="RuntimeError: boom",
        stderr_tail="warning: x\nRuntimeError: boom",
    )
    text = build_feedback(v)
    assert "Error:\nRuntimeError: boom\nstderr:\nwarning: x" in text
    same = Verdict(
        status=Status.RUNTIME_ERROR, message="RuntimeError: boom", stderr_tail="RuntimeError: boom"
    )
    assert "stderr:" not in build_feedback(same)


def test_numerical_mismatch_details() -> None:
    m = Mismatch(
        trial=2,
        distribution="shifted",
        max_abs_diff=0.5,
        mean_abs_diff=0.0125,
        worst_index=[3, 7],
        worst_expected=1.25,
        worst_got=0.75,
        mismatched=40,
        numel=4096,
    )
    v = Verdict(
        status=Status.NUMERICAL_MISMATCH, mismatch=m, trials_passed=2, trials_total=5, device="cuda"
    )
    text = build_feedback(v)
    assert "Correctness trials passed: 2/5." in text
    assert "max abs diff 0.5, mean abs diff 0.0125" in text
    assert "40 of 4096 elements out of tolerance (0.977%)" in text  # 100 * 40 / 4096 = 0.9765625
    assert "Worst element at index [3, 7]: expected 1.25, got 0.75." in text
    assert "trial 2 (inputs: shifted)" in text


def test_shape_and_dtype_mismatch() -> None:
    m = Mismatch(
        trial=0,
        distribution="native",
        expected_shape=[4, 16],
        got_shape=[4, 8],
        expected_dtype="torch.float32",
        got_dtype="torch.float16",
    )
    text = build_feedback(Verdict(status=Status.SHAPE_MISMATCH, mismatch=m))
    assert "expected [4, 16], got [4, 8]" in text
    assert "expected torch.float32, got torch.float16" in text


def test_reward_hack_rule_reason_and_alternative() -> None:
    v = Verdict(
        status=Status.REWARD_HACK,
        rule="torch_compute_in_forward",
        message="forward called PyTorch compute ops (aten::mm) beside the Triton kernel",
        audit=Audit(
            kernel_launches=1,
            torch_ops={"aten::mm": 2, "aten::add": 1, "aten::relu": 2},
            violations=["output produced by aten::mm"],
        ),
    )
    text = build_feedback(v)
    assert "Rule broken: torch_compute_in_forward." in text
    assert "Reason: forward called PyTorch compute ops (aten::mm)" in text
    # sorted by count (desc) then name: deterministic
    assert (
        "PyTorch compute ops seen in forward: aten::mm (x2), aten::relu (x2), aten::add (x1)."
        in text
    )
    assert "Violation: output produced by aten::mm" in text
    assert ALLOWED_INSTEAD in text


def test_correct_with_gpu_timing() -> None:
    t = Timing(median_ms=0.123, mean_ms=0.125, std_ms=0.002, min_ms=0.12, max_ms=0.13, trials=50)
    r = Timing(median_ms=0.3075, mean_ms=0.31, std_ms=0.01, min_ms=0.3, max_ms=0.33, trials=50)
    v = Verdict(
        status=Status.CORRECT,
        correct=True,
        device="cuda",
        runtime=t,
        ref_runtime=r,
        speedup=2.5,
        speedup_vs_compile=1.25,
        trials_passed=5,
        trials_total=5,
    )
    text = build_feedback(v)
    assert (
        "Timing: your ModelNew 0.123 ms (median of 50 trials), PyTorch reference 0.3075 ms." in text
    )
    assert "Speedup over PyTorch: 2.50x; over torch.compile: 1.25x." in text
    assert "correct and 2.50x faster" in text
    assert text.endswith(FeedbackConfig().closing_correct)
    slow = v.model_copy(update={"speedup": 0.8})
    assert "slower than PyTorch (0.80x)" in build_feedback(slow)


def test_correct_on_cpu_says_untimed() -> None:
    text = build_feedback(Verdict(status=Status.CORRECT, correct=True, device="cpu"))
    assert "Timing: not measured on the CPU interpreter (correctness only)." in text


def test_truncated_response_hint() -> None:
    text = build_feedback(Verdict(status=Status.NO_CODE), response_truncated=True)
    assert "cut off at the token limit" in text


def test_every_status_has_text_and_is_deterministic() -> None:
    assert set(STATUS_TEXT) == set(Status)
    for s in Status:
        v = Verdict(status=s, message=f"details of {s.value}")
        assert build_feedback(v) == build_feedback(v.model_copy(deep=True))
        assert f"Evaluation result: {s.value}" in build_feedback(v)


def test_max_chars_is_a_hard_cap() -> None:
    v = Verdict(
        status=Status.RUNTIME_ERROR, message="x" * 50_000 + "\nLAST LINE", stderr_tail="y" * 20_000
    )
    cfg = FeedbackConfig(max_chars=600, error_chars=400)
    text = build_feedback(v, cfg)
    assert len(text) <= 600
    assert text.endswith(cfg.closing)


def test_trim_text_hand_example() -> None:
    text = "\n".join(f"line{i}" for i in range(10))  # 10 lines of 5 chars: 59 chars
    assert trim_text(text, 100) == text  # short enough: unchanged
    # head 2 + tail 3 lines: 5 names x 5 chars + 25 for the marker + 5 newlines = 55 chars
    expected = "line0\nline1\n... [5 lines omitted] ...\nline7\nline8\nline9"
    assert len(expected) == 55
    assert trim_text(text, 55, head_lines=2, tail_lines=3) == expected
    # one char less: the head shrinks first (head * 2 >= tail), to 49 chars
    assert (
        trim_text(text, 54, head_lines=2, tail_lines=3)
        == "line0\n... [6 lines omitted] ...\nline7\nline8\nline9"
    )


def test_trim_text_keeps_candidate_frame() -> None:
    lines = [f"line{i}:" + "." * 30 for i in range(10)]  # 36 chars each
    lines[4] = 'File "candidate.py", line 3'
    lines[5] = "    bad()"
    text = "\n".join(lines)
    expected = "\n".join(
        [
            lines[0],
            "... [3 lines omitted] ...",
            lines[4],
            lines[5],
            "... [3 lines omitted] ...",
            lines[9],
        ]
    )
    assert len(expected) < len(text)
    assert (
        trim_text(text, len(expected), head_lines=1, tail_lines=1, markers=["candidate"])
        == expected
    )
    # without the marker the frame is just middle text and is dropped
    assert "bad()" not in trim_text(
        text, len(expected), head_lines=1, tail_lines=1, markers=["other"]
    )
