"""Configuration of a task: prompts, feedback messages, extraction.

Covers: `PromptConfig` (templates and what goes in them), `FeedbackConfig` (shape and size of
the feedback message) and `TaskConfig` (task type plus both). Torch-free; imports nothing from
the rest of the package. Does not cover: building prompts or feedback (rollout.prompts,
rollout.feedback) or the task registry (rollout.tasks).
"""

from __future__ import annotations

from pydantic import Field

from tritonforge.config import Section

__all__ = ["FeedbackConfig", "PromptConfig", "TaskConfig"]


class PromptConfig(Section):
    """Which templates build the first messages of a kernel episode, and what goes in them."""

    system_template: str = Field(
        "system", description="template name in rollout/prompts/ (without .txt) or a file path"
    )
    user_template: str = Field("user", description="template name or file path")
    example_template: str = Field(
        "example_add", description="one-shot example (reference + Triton solution): name or path"
    )
    include_example: bool = Field(True, description="put the one-shot example in the user message")
    hardware: str | None = Field(
        None,
        description="facts about the target device: a preset name (h200, h100, cpu-interpreter) "
        "or free text; None leaves the section out",
    )
    thinking: bool = Field(
        True,
        description="ask for reasoning in <think> tags; also passed to the chat template as "
        "enable_thinking by render_prompt",
    )
    use_system_message: bool = Field(
        True,
        description="False merges the system text into the user message (for models without a system role)",
    )


class FeedbackConfig(Section):
    """Shape and size of the feedback message."""

    max_chars: int = Field(4000, ge=300, description="hard cap on the whole message")
    error_chars: int = Field(2000, ge=100, description="cap on the trimmed error/traceback")
    error_head_lines: int = Field(12, ge=1, description="first lines of an error kept")
    error_tail_lines: int = Field(25, ge=1, description="last lines of an error kept")
    max_line_chars: int = Field(300, ge=40, description="longer lines are cut in the middle")
    max_marked_frames: int = Field(
        6, ge=0, description="traceback frames in the candidate's file kept from the middle"
    )
    candidate_markers: list[str] = Field(
        default_factory=lambda: ["candidate", "<string>", "solution", "model_new"],
        description="substrings of a traceback's file path that mark the candidate's own file",
    )
    include_stderr: bool = Field(
        True, description="add the stderr tail when the message does not contain it"
    )
    include_stdout: bool = False
    include_audit: bool = Field(
        True, description="list the PyTorch ops/violations the audit saw (hacks)"
    )
    include_timing: bool = True
    max_listed_ops: int = Field(8, ge=1)
    closing: str = Field(
        "Reply with the complete corrected program in one ```python block.",
        description="last line after a failure",
    )
    closing_correct: str = Field(
        "If you can make it faster while keeping it correct, reply with the complete improved program in one ```python block.",
        description="last line after a correct answer",
    )


class TaskConfig(Section):
    """Which task type, and the settings of its prompts, extraction and feedback."""

    type: str = Field("kernel", description="kernel | arith")
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    feedback: FeedbackConfig = Field(default_factory=FeedbackConfig)
    allow_code_in_think: bool = Field(
        False, description="kernel: use code found only inside <think> as a last resort"
    )
    reward: str | None = Field(
        None,
        description="kernel: reward function of each answer's verdict (rollout/rewards.py "
        "REWARDS: tritonforge, tritonforge_compile, tritonforge_original, kevin, log_speedup); "
        "None: the one the verdict's preset's source used",
    )
    hack_penalty: float = Field(0.0, description="kernel: reward of a reward_hack verdict")
