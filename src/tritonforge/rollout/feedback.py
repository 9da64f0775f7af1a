"""The feedback message a model reads after a turn, built from the evaluator's Verdict.

Covers: `FeedbackConfig` (from config.task), `build_feedback(verdict, cfg) -> str` (status in words, the trimmed
error or traceback, mismatch details, the reward-hack rule with its reason and what is allowed
instead, timings and speedup, what to fix next) and `trim_text` (head + tail + the lines that
point at the candidate's file). Deterministic: the same verdict and config always give the same
text, so RL turns and the SFT data builder share one format. Does not cover: turning the text
into tokens (the agent loop) or judging (see evaluation).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tritonforge.config.task import FeedbackConfig
from tritonforge.types import Mismatch, Status, Verdict

__all__ = [
    "ALLOWED_INSTEAD",
    "STATUS_TEXT",
    "FeedbackConfig",
    "build_feedback",
    "describe_mismatch",
    "trim_text",
]

ALLOWED_INSTEAD = (
    "Allowed instead: do all computation of forward in your own @triton.jit kernels; use PyTorch "
    "only for allocating outputs (torch.empty/empty_like/zeros), views and metadata (.view, "
    ".reshape, .contiguous, .shape, .stride()), reading parameters and launching kernels."
)

# Status -> (what happened, what to fix next). CORRECT's fix text depends on timing (see _fix).
STATUS_TEXT: dict[Status, tuple[str, str]] = {
    Status.NO_CODE: (
        "No code was found in your answer.",
        "Reply with the whole program in one ```python block that defines class ModelNew.",
    ),
    Status.SYNTAX_ERROR: (
        "Your code has a Python syntax error.",
        "Fix the syntax at the line shown and make sure the file is complete (not cut off).",
    ),
    Status.IMPORT_ERROR: (
        "Importing your module failed.",
        "Import only torch, triton, triton.language and the standard library, and check the names you import.",
    ),
    Status.MISSING_MODEL_NEW: (
        "Your module does not define class ModelNew.",
        "Define class ModelNew(torch.nn.Module) with the same __init__ arguments and forward signature as Model.",
    ),
    Status.INIT_ERROR: (
        "Constructing ModelNew(*get_init_inputs()) failed.",
        "Make ModelNew.__init__ accept the same arguments as Model.__init__ and create the same parameters.",
    ),
    Status.COMPILE_ERROR: (
        "Your Triton kernel failed to compile.",
        "Fix the kernel at the line the compiler points to: block sizes as tl.constexpr, power-of-two tl.arange lengths, consistent dtypes, only triton.language operations inside @triton.jit.",
    ),
    Status.RUNTIME_ERROR: (
        "Your forward raised an error at runtime.",
        "Check the failing line: kernel argument order, grid, pointer arithmetic, strides and tensor shapes.",
    ),
    Status.OUT_OF_RESOURCES: (
        "The kernel needs more shared memory or registers than the device has.",
        "Use smaller BLOCK sizes, fewer num_stages or fewer warps.",
    ),
    Status.ILLEGAL_MEMORY_ACCESS: (
        "The kernel accessed memory out of bounds.",
        "Mask every tl.load/tl.store with offsets < n and check strides and index arithmetic.",
    ),
    Status.CRASH: (
        "The process running your code crashed.",
        "Look for out-of-bounds accesses, invalid launches or unbounded recursion.",
    ),
    Status.TIMEOUT: (
        "Your code ran past its time budget.",
        "Avoid Python loops over elements and huge grids; launch few kernels with enough work each; make loops inside kernels terminate.",
    ),
    Status.RESOURCE_LIMIT: (
        "Your code exceeded a resource limit (memory, processes, files or output).",
        "Allocate only the outputs you need; do not spawn processes, write files or print a lot.",
    ),
    Status.SHAPE_MISMATCH: (
        "Your output has the wrong shape.",
        "Return outputs with exactly the reference's shapes (check reductions, keepdim and views).",
    ),
    Status.DTYPE_MISMATCH: (
        "Your output has the wrong dtype.",
        "Return the reference's dtype: allocate outputs with the input dtype and cast accumulators back before storing.",
    ),
    Status.NUMERICAL_MISMATCH: (
        "Your output is numerically wrong.",
        "Compare your kernel with the reference step by step: index arithmetic, masks and `other=` values of masked loads, fp32 accumulation, the order of operations.",
    ),
    Status.INPUT_MUTATED: (
        "Your forward modified its inputs in place.",
        "Write results into tensors you allocate; never store into input pointers.",
    ),
    Status.REWARD_HACK: ("Your answer was rejected as a reward hack.", ALLOWED_INSTEAD),
    Status.INTERNAL_ERROR: (
        "The evaluator failed on its side; this was not caused by your code.",
        "Submit the program again (improved if you can).",
    ),
    Status.JUDGE_FAULT: (
        "The evaluator could not finish judging (its own resources or a machine too busy); "
        "not caused by your code.",
        "Submit the program again.",
    ),
    Status.CORRECT: ("Correct: your output matches the reference.", ""),
}

_FILE_LINE = re.compile(r'File "([^"]+)", line \d+')


def _clip_line(line: str, limit: int) -> str:
    if len(line) <= limit:
        return line
    half = (limit - 5) // 2
    return f"{line[:half]} ... {line[-half:]}"


def _marked_lines(lines: Sequence[str], markers: Sequence[str], max_frames: int) -> set[int]:
    """Indices of traceback lines naming the candidate's file plus the source line after each."""
    hits: list[int] = []
    for i, line in enumerate(lines):
        m = _FILE_LINE.search(line)
        if m and any(k.lower() in m.group(1).lower() for k in markers):
            hits.append(i)
    keep: set[int] = set()
    for i in hits[-max_frames:] if max_frames else []:
        keep.add(i)
        if i + 1 < len(lines) and not _FILE_LINE.search(lines[i + 1]):
            keep.add(i + 1)
    return keep


def _assemble(lines: Sequence[str], head: int, tail: int, marked: set[int]) -> str:
    n = len(lines)
    keep = set(range(min(head, n))) | set(range(max(n - tail, 0), n)) | marked
    out: list[str] = []
    gap = 0
    for i in range(n):
        if i in keep:
            if gap:
                out.append(f"... [{gap} lines omitted] ...")
                gap = 0
            out.append(lines[i])
        else:
            gap += 1
    return "\n".join(out)


def trim_text(
    text: str,
    max_chars: int,
    head_lines: int = 12,
    tail_lines: int = 25,
    markers: Sequence[str] = (),
    max_line_chars: int = 300,
    max_marked_frames: int = 6,
) -> str:
    """Shorten an error text to <= max_chars: head and tail lines, plus candidate-file frames.

    Lines are dropped (marked with `... [k lines omitted] ...`) before any line is cut; the
    head/tail shrink one line at a time until the text fits; a final character cut keeps the
    start and the end.
    """
    text = text.strip("\n")
    if len(text) <= max_chars:
        return text
    lines = [_clip_line(line.rstrip(), max_line_chars) for line in text.split("\n")]
    marked = _marked_lines(lines, markers, max_marked_frames)
    head, tail = head_lines, tail_lines
    out = _assemble(lines, head, tail, marked)
    while len(out) > max_chars and (head > 1 or tail > 1 or marked):
        if marked and head <= 1 and tail <= 1:
            marked = set()
        elif head > 1 and head * 2 >= tail:
            head -= 1
        else:
            tail = max(tail - 1, 1)
        out = _assemble(lines, head, tail, marked)
    if len(out) > max_chars:
        marker = "\n... [truncated] ...\n"
        keep = max(max_chars - len(marker), 0)
        out = out[: keep // 3] + marker + out[len(out) - (keep - keep // 3) :]
    return out


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.6g}"


def describe_mismatch(m: Mismatch) -> list[str]:
    """Lines describing where the output differed from the reference."""
    where = f"output {m.output_index}, trial {m.trial} (inputs: {m.distribution})"
    lines: list[str] = []
    if m.expected_shape is not None and m.got_shape is not None and m.expected_shape != m.got_shape:
        lines.append(f"Shape of {where}: expected {m.expected_shape}, got {m.got_shape}.")
    if m.expected_dtype is not None and m.got_dtype is not None and m.expected_dtype != m.got_dtype:
        lines.append(f"Dtype of {where}: expected {m.expected_dtype}, got {m.got_dtype}.")
    if m.max_abs_diff is not None:
        count = ""
        if m.mismatched is not None and m.numel:
            count = f"; {m.mismatched} of {m.numel} elements out of tolerance ({100.0 * m.mismatched / m.numel:.3g}%)"
        lines.append(
            f"Difference at {where}: max abs diff {_num(m.max_abs_diff)}, mean abs diff {_num(m.mean_abs_diff)}{count}."
        )
    if m.worst_index is not None:
        lines.append(
            f"Worst element at index {m.worst_index}: expected {_num(m.worst_expected)}, got {_num(m.worst_got)}."
        )
    return lines or [f"Mismatch at {where}."]


def _timing_lines(v: Verdict) -> list[str]:
    if v.device.lower().startswith("cpu") or "interp" in v.device.lower():
        return ["Timing: not measured on the CPU interpreter (correctness only)."]
    if v.runtime is None:
        return ["Timing: not measured."] if v.status is Status.CORRECT else []
    line = (
        f"Timing: your ModelNew {v.runtime.median_ms:.4g} ms (median of {v.runtime.trials} trials)"
    )
    if v.ref_runtime is not None:
        line += f", PyTorch reference {v.ref_runtime.median_ms:.4g} ms"
    if v.ref_compile_runtime is not None:
        line += f", torch.compile {v.ref_compile_runtime.median_ms:.4g} ms"
    out = [line + "."]
    if v.speedup is not None:
        sp = f"Speedup over PyTorch: {v.speedup:.2f}x"
        if v.speedup_ci is not None:
            sp += f" (95% interval {v.speedup_ci[0]:.2f}-{v.speedup_ci[1]:.2f})"
        if v.speedup_vs_compile is not None:
            sp += f"; over torch.compile: {v.speedup_vs_compile:.2f}x"
        out.append(sp + ".")
    return out


def _hack_lines(v: Verdict, cfg: FeedbackConfig) -> list[str]:
    lines = [f"Rule broken: {v.rule or 'unspecified'}."]
    if v.message.strip():
        lines.append(f"Reason: {_clip_line(v.message.strip(), 600)}")
    if cfg.include_audit and v.audit is not None:
        if v.audit.torch_ops:
            ops = sorted(v.audit.torch_ops.items(), key=lambda kv: (-kv[1], kv[0]))[
                : cfg.max_listed_ops
            ]
            lines.append(
                "PyTorch compute ops seen in forward: "
                + ", ".join(f"{k} (x{n})" for k, n in ops)
                + "."
            )
        for item in v.audit.violations[: cfg.max_listed_ops]:
            lines.append(f"Violation: {_clip_line(item, 300)}")
    lines.append(ALLOWED_INSTEAD)
    return lines


def _fix(v: Verdict, truncated: bool) -> str:
    if v.status is not Status.CORRECT:
        fix = STATUS_TEXT[v.status][1]
    elif v.speedup is None:
        fix = "Nothing to fix for correctness; keep the output exact if you change the kernels."
    elif v.speedup < 1.0:
        fix = (
            f"It is correct but slower than PyTorch ({v.speedup:.2f}x). Make it faster: fuse the "
            "operations into fewer kernels, avoid intermediate tensors and extra copies, tune "
            "BLOCK sizes and num_warps."
        )
    else:
        fix = (
            f"It is correct and {v.speedup:.2f}x faster than PyTorch. To go further: fuse more, "
            "improve memory access (coalesced, vectorised loads), tune BLOCK sizes and num_warps."
        )
    if truncated:
        fix += " Your answer was cut off at the token limit: think more briefly and write the code sooner."
    return f"What to fix next: {fix}"


def _error_text(v: Verdict, cfg: FeedbackConfig) -> tuple[str, str]:
    """(label, raw text) of the error/details section; empty text when there is none."""
    if v.status in (Status.CORRECT, Status.REWARD_HACK):
        return "", ""
    parts = [v.message.strip()] if v.message.strip() else []
    stderr = v.stderr_tail.strip()
    if cfg.include_stderr and stderr and stderr not in v.message:
        parts.append(f"stderr:\n{stderr}")
    if cfg.include_stdout and v.stdout_tail.strip():
        parts.append(f"stdout:\n{v.stdout_tail.strip()}")
    label = "Details" if v.status.ran else "Error"
    return label, "\n".join(parts)


def build_feedback(
    verdict: Verdict, cfg: FeedbackConfig | None = None, response_truncated: bool = False
) -> str:
    """The user message for the next turn (deterministic in its inputs; <= cfg.max_chars)."""
    cfg = cfg or FeedbackConfig()
    v = verdict
    phase = f" (phase: {v.phase})" if v.phase and v.status is not Status.CORRECT else ""
    head = [f"Evaluation result: {v.status.value}{phase}. {STATUS_TEXT[v.status][0]}"]
    if v.trials_total:
        head.append(f"Correctness trials passed: {v.trials_passed}/{v.trials_total}.")
    body: list[str] = []
    if v.mismatch is not None:
        body.extend(describe_mismatch(v.mismatch))
    if v.status is Status.REWARD_HACK:
        body.extend(_hack_lines(v, cfg))
    if cfg.include_timing and (v.status is Status.CORRECT or v.runtime is not None):
        body.extend(_timing_lines(v))
    tail = [
        _fix(v, response_truncated),
        cfg.closing_correct if v.status is Status.CORRECT else cfg.closing,
    ]
    fixed = "\n".join(head + body + tail)
    label, err = _error_text(v, cfg)
    section = ""
    if err:
        budget = min(cfg.error_chars, cfg.max_chars - len(fixed) - len(label) - 10)
        if budget >= 80:
            trimmed = trim_text(
                err,
                budget,
                cfg.error_head_lines,
                cfg.error_tail_lines,
                cfg.candidate_markers,
                cfg.max_line_chars,
                cfg.max_marked_frames,
            )
            section = f"{label}:\n{trimmed}"
    blocks = ["\n".join(head), section, "\n".join(body), "\n".join(tail)]
    text = "\n\n".join(b for b in blocks if b)
    if len(text) > cfg.max_chars:
        end = "\n\n" + "\n".join(tail)
        cut = "\n... [feedback truncated] ..."
        text = text[: max(cfg.max_chars - len(end) - len(cut), 0)] + cut + end
        text = text[-cfg.max_chars :] if len(text) > cfg.max_chars else text
    return text
