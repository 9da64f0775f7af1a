"""Shared records that cross process boundaries: problems, verdicts, turns, trajectories, groups.

Covers: plain typed data (pydantic models) with JSON round-trips. Does not cover: anything that
needs torch (tensors live in `problems.runtime`, `evaluation.*` and `training.*`) or behaviour
beyond small derived properties. Every boundary returns one of these records, never None.
"""

from __future__ import annotations

import math
import re
from enum import Enum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic_core.core_schema import SerializationInfo


class Record(BaseModel):
    """Base for all records: unknown fields are rejected so typos fail loudly."""

    model_config = ConfigDict(extra="forbid", frozen=False)


def finite_json(value: Any, path: str = "") -> tuple[Any, list[str]]:
    """JSON-mode data with every non-finite float (nan, inf) replaced by None, and one note per
    replaced value naming where it was. JSON has no NaN: `json.dumps(allow_nan=False)` (what
    the HTTP responses use) raises on one, and a strict parser rejects the `NaN` literal."""
    if isinstance(value, float) and not math.isfinite(value):
        return None, [f"{path or 'value'}: {value} sent as null (JSON has no {value})"]
    if isinstance(value, dict):
        out, notes = {}, []
        for k, v in value.items():
            out[k], found = finite_json(v, f"{path}.{k}" if path else str(k))
            notes += found
        return out, notes
    if isinstance(value, (list, tuple)):
        items = [finite_json(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return [v for v, _ in items], [n for _, found in items for n in found]
    return value, []


def _null_is_nan(value: Any) -> Any:
    return math.nan if value is None else value


_SENT_AS_NULL = re.compile(r"^(?P<path>[^:]+): (?P<value>nan|-?inf) sent as null")
_PATH_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def restore_nonfinite(data: dict[str, Any], notes: list[Any]) -> dict[str, Any]:
    """`data` (a copy where changed) with the values finite_json sent as null put back, read
    from its notes: a round trip through JSON keeps nan, inf and -inf."""
    for note in notes:
        m = _SENT_AS_NULL.match(note) if isinstance(note, str) else None
        if m is None:
            continue
        keys = [int(i) if i else k for i, k in _PATH_PART.findall(m["path"])]
        data = _put(data, keys, float(m["value"]))
    return data


def _put(node: Any, keys: list[Any], value: float) -> Any:
    """`node` with `value` at `keys` where that place holds None (copies along the path)."""
    if not keys:
        return value if node is None else node
    key, rest = keys[0], keys[1:]
    if isinstance(node, dict) and key in node:
        return {**node, key: _put(node[key], rest, value)}
    if isinstance(node, list) and isinstance(key, int) and key < len(node):
        return [*node[:key], _put(node[key], rest, value), *node[key + 1 :]]
    return node


# A float that finite_json may have sent as null: parsed back as NaN (when no note says which
# value it was), so a verdict that held one in a field that is not optional still validates.
JsonFloat = Annotated[float, BeforeValidator(_null_is_nan)]


# --------------------------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------------------------


class Problem(Record):
    """One task: a reference PyTorch program in KernelBench format at one size preset.

    `reference_src` defines `Model`, `get_inputs()` and `get_init_inputs()` (the input factory and
    init inputs); `solution_src`, when known, defines a correct Triton `ModelNew`.
    """

    id: str = Field(description="Stable id, e.g. 'builtin/relu' or 'kernelbench/L1/19_ReLU'.")
    suite: str = Field(description="'builtin' or 'kernelbench' (or a user suite name).")
    level: int = 1
    problem_id: int = 0
    name: str
    category: str = ""
    reference_src: str
    size: str = Field(
        "original", description="Size preset the source is at: cpu|gpu|original|scaled."
    )
    solution_src: str | None = None
    atol: float | None = Field(None, description="Per-problem absolute tolerance override.")
    rtol: float | None = Field(None, description="Per-problem relative tolerance override.")
    flops: float | None = Field(None, description="Useful FLOPs of one forward, for plausibility.")
    bytes_moved: float | None = Field(
        None, description="Minimum bytes of one forward, for plausibility."
    )
    meta: dict[str, Any] = Field(default_factory=dict)

    @property
    def slug(self) -> str:
        return self.id.replace("/", "__")


# --------------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------------


class Status(str, Enum):
    """Outcome of one evaluation. Ordered roughly by how far the candidate got."""

    NO_CODE = "no_code"
    SYNTAX_ERROR = "syntax_error"
    IMPORT_ERROR = "import_error"
    MISSING_MODEL_NEW = "missing_model_new"
    INIT_ERROR = "init_error"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    OUT_OF_RESOURCES = "out_of_resources"
    ILLEGAL_MEMORY_ACCESS = "illegal_memory_access"
    CRASH = "crash"
    TIMEOUT = "timeout"
    RESOURCE_LIMIT = "resource_limit"
    SHAPE_MISMATCH = "shape_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    NUMERICAL_MISMATCH = "numerical_mismatch"
    INPUT_MUTATED = "input_mutated"
    REWARD_HACK = "reward_hack"
    INTERNAL_ERROR = "internal_error"
    # the judge could not finish for reasons of its own (the machine too busy twice in a row,
    # out of device memory after a retry alone, its reference timing process died twice): not
    # the candidate's status; ask again
    JUDGE_FAULT = "judge_fault"
    CORRECT = "correct"

    @property
    def ran(self) -> bool:
        """The candidate's forward produced outputs (right or wrong)."""
        return self in _RAN

    @property
    def is_fault(self) -> bool:
        """A failure of the candidate before it produced comparable outputs."""
        return not self.ran and self is not Status.CORRECT and self is not Status.JUDGE_FAULT

    @property
    def is_judge_fault(self) -> bool:
        """The judge, not the candidate, failed: counted apart from candidate statuses."""
        return self is Status.JUDGE_FAULT


_RAN = {
    Status.SHAPE_MISMATCH,
    Status.DTYPE_MISMATCH,
    Status.NUMERICAL_MISMATCH,
    Status.INPUT_MUTATED,
    Status.CORRECT,
}


class Mismatch(Record):
    """Where the first failing trial differed from the reference."""

    trial: int
    distribution: str
    output_index: int = 0
    max_abs_diff: float | None = None
    mean_abs_diff: float | None = None
    worst_index: list[int] | None = None
    worst_expected: float | None = None
    worst_got: float | None = None
    mismatched: int | None = None
    numel: int | None = None
    expected_shape: list[int] | None = None
    got_shape: list[int] | None = None
    expected_dtype: str | None = None
    got_dtype: str | None = None


class Timing(Record):
    """Wall-clock statistics of one timed callable in milliseconds."""

    median_ms: JsonFloat
    mean_ms: JsonFloat
    std_ms: JsonFloat
    min_ms: JsonFloat
    max_ms: JsonFloat
    trials: int


class Audit(Record):
    """What the candidate's forward actually did, as recorded in its sandbox."""

    kernel_launches: int = 0
    kernels: list[str] = Field(default_factory=list)
    torch_ops: dict[str, int] = Field(
        default_factory=dict, description="Non-glue aten ops in forward."
    )
    glue_ops: dict[str, int] = Field(default_factory=dict)
    custom_share: float | None = Field(None, description="Custom-kernel share of forward work.")
    share_basis: str | None = Field(
        None, description="'work': 1 - PyTorch's work / the reference's (judge/work.py)."
    )
    epilogue_ops: dict[str, int] = Field(
        default_factory=dict,
        description="PyTorch reductions/scales run after the last kernel on its output only "
        "(O(output) work): allowed and reported in hybrid mode, rule torch_epilogue in strict.",
    )
    violations: list[str] = Field(default_factory=list)


class Verdict(Record):
    """The evaluator's answer for one candidate: facts only (status, rule, correctness evidence,
    times, speedups and their intervals, work share, notes); the task turns it into a reward
    (rollout/rewards.py). Always produced; never raised."""

    status: Status
    message: str = Field("", description="What a model should read to fix the candidate.")
    compiled: bool = Field(False, description="Its custom kernels compiled and launched.")
    correct: bool = False
    problem_id: str = ""
    device: str = "cpu"
    mode: str = "strict"
    preset: str = Field("strict", description="The preset of rules it was judged under.")
    phase: str | None = Field(
        None, description="Phase that failed: static|import|init|compile|correctness|timing."
    )
    rule: str | None = Field(None, description="Which reward-hack rule fired, if any.")
    trials_passed: int = 0
    trials_total: int = 0
    mismatch: Mismatch | None = None
    runtime: Timing | None = None
    ref_runtime: Timing | None = None
    ref_compile_runtime: Timing | None = None
    speedup: float | None = Field(None, description="Eager reference median / candidate median.")
    speedup_vs_compile: float | None = Field(
        None, description="torch.compile(reference) median / candidate median."
    )
    speedup_ci: list[JsonFloat] | None = Field(
        None, description="95% bootstrap interval [low, high] of `speedup` (timing noise)."
    )
    speedup_vs_compile_ci: list[JsonFloat] | None = None
    timing_clock: str | None = Field(
        None,
        description="'cuda_events' (device time of the call queued behind a lead, floored by "
        "host time), 'cuda_events_idle' (device time around an idle stream) or 'host'.",
    )
    audit: Audit | None = None
    reference_nondeterministic: bool = Field(
        False,
        description="The problem's reference gives different outputs on the same inputs: values "
        "were compared by statistics, not element by element.",
    )
    degenerate: str | None = Field(
        None,
        description="The problem is degenerate, measured: its reference output does not depend "
        "on its inputs, or it leaves an input unused (why). Its speedup earns no reward "
        "(correctness only).",
    )
    stdout_tail: str = ""
    stderr_tail: str = ""
    notes: list[str] = Field(default_factory=list)
    phase_seconds: dict[str, JsonFloat] = Field(default_factory=dict)
    wall_seconds: JsonFloat = 0.0
    cached: bool = False

    @model_validator(mode="before")
    @classmethod
    def _read_nonfinite(cls, data: Any) -> Any:
        """A verdict read back from its JSON form gets its non-finite values again. A `reward`
        (verdicts written before rewards moved to the task side: rollout/rewards.py) is
        dropped: a verdict states facts only."""
        if isinstance(data, dict) and "reward" in data:
            data = {k: v for k, v in data.items() if k != "reward"}
        if isinstance(data, dict) and isinstance(data.get("notes"), list):
            return restore_nonfinite(data, data["notes"])
        return data

    @model_serializer(mode="wrap")
    def _finite_json(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        """Every JSON form of a verdict (HTTP answers, --json, logs) is valid JSON: a non-finite
        float anywhere in it is sent as null, with a note saying where (finite_json)."""
        data = handler(self)
        if not info.mode_is_json() or not isinstance(data, dict):
            return data
        data, found = finite_json(data)
        notes = data.get("notes")
        if found and isinstance(notes, list):  # one note per place (a parsed-back NaN: no twin)
            said = {n.split(": ", 1)[0] for n in notes if isinstance(n, str)}
            data["notes"] = notes + [n for n in found if n.split(": ", 1)[0] not in said]
        return data

    def short(self) -> str:
        """One line for logs and progress bars."""
        sp = f" speedup={self.speedup:.2f}x" if self.speedup is not None else ""
        if self.speedup_vs_compile is not None:
            sp += f" vs_compile={self.speedup_vs_compile:.2f}x"
        rule = f" rule={self.rule}" if self.rule else ""
        return f"{self.problem_id} {self.status.value}{rule}{sp}"


# --------------------------------------------------------------------------------------------
# Rollouts
# --------------------------------------------------------------------------------------------


class GenStatus(str, Enum):
    OK = "ok"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"
    TIMEOUT = "timeout"


class Generation(Record):
    """One engine call: exact token ids and their logprobs, or a failure status."""

    status: GenStatus
    token_ids: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    latency_s: float = 0.0


class Turn(Record):
    """One assistant turn of a trajectory with its evaluation."""

    index: int
    prompt_len: int = Field(description="Context length (tokens) before this turn's generation.")
    response_ids: list[int]
    response_logprobs: list[float]
    response_text: str
    code: str | None
    finish_reason: str | None = None
    verdict: Verdict | None = None
    reward: float = 0.0
    ret: float = Field(0.0, description="Discounted return R_t from this turn on.")
    feedback_ids: list[int] = Field(
        default_factory=list, description="Tokens appended after this turn (masked)."
    )
    feedback_text: str = ""


class Trajectory(Record):
    """A whole multi-turn episode as one token stream with a loss mask."""

    problem_id: str
    sample_index: int = 0
    group_id: str = ""
    policy_version: int = 0
    prompt_ids: list[int]
    token_ids: list[int] = Field(description="prompt + all turns + feedback, exactly as generated.")
    loss_mask: list[int] = Field(description="1 on model-generated tokens, 0 elsewhere.")
    rollout_logprobs: list[float] = Field(description="Per token; 0.0 where loss_mask is 0.")
    advantages: list[float] = Field(
        default_factory=list, description="Per token; filled by the buffer."
    )
    turns: list[Turn]
    status: str = Field("ok", description="ok | generation_failed | eval_failed")
    raw_reward: float = 0.0
    norm_reward: float | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.turns]

    @property
    def returns(self) -> list[float]:
        return [t.ret for t in self.turns]


class Group(Record):
    """n samples of one problem under one policy version."""

    group_id: str
    problem_id: str
    policy_version: int
    trajectories: list[Trajectory]
    stats: dict[str, float] = Field(default_factory=dict)
