"""Positive evidence that the candidate's kernels did the work: a trusted replay.

Covers: `take_recipe` (the recipe and the constants' bytes that one correctness trial's reply
carries; the candidate's word), `allowed_steps` (which steps a mode lets a recipe hold: strict,
launches and glue only; hybrid, any aten op but those that read device values to the host or
act outside tensors), and `evidence`, which parses the recipe strictly (recipe_format.py:
malformed or impossible is `protocol_violation`), builds the module of the candidate's kernels
alone (replay_kernels.py), starts a fresh replayer (a worker forked into the same sandbox, its
audit not armed, running only our code and those kernels: sandbox/replay_model.py) and runs the
recipe there on `replay_trials` fresh hidden inputs the candidate's process never saw. Every
output is compared by the judge; in strict mode the first replay also follows kernel data
(snapshots around every launch, in the replayer) and every output must hold data a kernel wrote.
A recipe that does the work with the candidate's own kernels passes whether or not it is what
the candidate's forward really did: the credit is deserved; one that does not, fails. The
replayer then is what gets timed (gpu_timing.py).
Verdicts: `reward_hack` with rule `replay_mismatch` (the replay's outputs differ),
`output_not_from_kernel` (strict: an output kernels did not write), `unreplayable` (no recipe,
a kernel that cannot run alone, a step the mode does not allow), `torch_compute` (strict: a
compute op in the recipe), `protocol_violation` (a malformed recipe); a replay that times out,
crashes or runs out of memory gets the status the candidate's own run would.
Does not cover: recording (sandbox/recipe.py), the CUDA C++ backend (its kernels are native code
a replay cannot load: not replayed, and its verdicts say so).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

from tritonforge.evaluation.judge.candidate import CandidateRun, Stop, failure_verdict
from tritonforge.evaluation.judge.compare import compare_to_reference
from tritonforge.evaluation.judge.gpu_lock import judge_device
from tritonforge.evaluation.judge.reference import Case
from tritonforge.evaluation.judge.replay_kernels import KernelModule, KernelRefused, kernel_module
from tritonforge.evaluation.judge.replies import Failure
from tritonforge.evaluation.judge.requests import ReplayLoad, ReplayRun, ReplayTrace
from tritonforge.evaluation.judge.session import Session
from tritonforge.evaluation.judge.tools import JudgeTools
from tritonforge.evaluation.judge.transport import Transport
from tritonforge.evaluation.judge.workerenv import private_scratch, worker_spec
from tritonforge.evaluation.sandbox.glue import GLUE, base_name
from tritonforge.evaluation.sandbox.recipe_format import (
    Recipe,
    RecipeError,
    Scalar,
    View,
    flatten,
    parse_recipe,
)
from tritonforge.evaluation.sandbox.replay_provenance import POISONS
from tritonforge.types import Audit, Status, Verdict

REPLAY_SEED = 2000  # hidden seeds of the replay trials: seed(problem, REPLAY_SEED + i)
# aten ops no recipe may hold in any mode: printing, reading files, storage surgery, streams.
# (A device value read to the host, `_local_scalar_dense`, is allowed: the replay repeats the
# read but the recorded value stays in later steps, so a value that depends on the inputs makes
# the replay wrong, and one that does not, say a parameter's, is right.)
REFUSED_OPS = frozenset(
    {"_print", "from_file", "resize_", "set_", "_resize_output_", "record_stream"}
    | {"_set_storage_offset", "sym_constrain_range"}
)


@dataclass
class Captured:
    """What a recipe trial's reply carried: the untrusted recipe (decoded JSON) and the fd of
    its constants' bytes, or the worker's reason for having none."""

    raw: Any = None
    blob: dict[str, Any] = field(default_factory=dict)
    fd: int | None = None
    error: str = ""

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def take_recipe(part: dict[str, Any] | None, fds: list[int]) -> Captured:
    """The recipe part of a run reply; its blob fd (the last fd) is taken out of `fds`."""
    if not isinstance(part, dict):
        return Captured(error="the worker sent no recipe")
    if isinstance(part.get("error"), str):
        return Captured(error=part["error"][:500])
    if not isinstance(part.get("blob"), dict) or not fds:
        return Captured(error="the recipe came without its constants")
    return Captured(raw=part.get("recipe"), blob=part["blob"], fd=fds.pop())


def allowed_steps(recipe: Recipe, mode: str) -> tuple[str, str] | None:
    """(rule, reason) when the recipe holds a step `mode` does not allow, else None."""
    for op in recipe.ops():
        name = base_name(op.name)
        if name in REFUSED_OPS:
            return "unreplayable", (
                f"forward ran {op.name}, which a replay cannot repeat (it reads a device value "
                "to the host or changes a tensor's storage): keep such work out of forward"
            )
        if mode == "strict" and name not in GLUE:
            return "torch_compute", f"forward computed {op.name} in PyTorch (strict mode)"
    if not recipe.launches():
        if mode == "strict":
            return "no_kernel_launch", "forward launched no Triton kernel"
    return None


# what JITFunction.run takes besides the kernel's parameters
LAUNCH_OPTIONS = frozenset(
    {
        "num_warps",
        "num_stages",
        "num_ctas",
        "maxnreg",
        "enable_fp_fusion",
        "launch_cooperative_grid",
    }
    | {"launch_pdl", "enable_reflect_ftz", "debug", "sanitize_overflow", "instrumentation_mode"}
)


def launch_arguments(recipe: Recipe, kernels: KernelModule) -> str | None:
    """Why a launch's arguments do not fit its kernel (None when every one does): a kernel the
    module does not hold, too many positional arguments, an unknown keyword, or anything but a
    plain value bound to a `tl.constexpr` parameter (under the CPU interpreter a constexpr
    reaches the body as the object itself: a tensor there is PyTorch inside the kernel; on a
    GPU it does not compile)."""
    for step in recipe.launches():
        params = kernels.params.get(step.kernel)
        if params is None:
            return f"a launch of {step.kernel!r}, which is no top-level @triton.jit kernel"
        if len(step.args) > len(params):
            return f"{step.kernel} launched with {len(step.args)} arguments for {len(params)}"
        bound = dict(zip([p for p, _ in params], step.args))
        constexpr = {p for p, c in params if c}
        for name, value in step.kwargs:
            if name not in dict(params) and name not in LAUNCH_OPTIONS:
                return f"{step.kernel} launched with an unknown keyword {name!r}"
            bound[name] = value
        for name, value in bound.items():
            if name in constexpr and not all(isinstance(v, Scalar) for v in flatten(value)):
                return (
                    f"{step.kernel}'s tl.constexpr parameter {name} was given a tensor: a "
                    "constexpr must be a plain value"
                )
    return None


def _hack(rule: str, message: str, phase: str = "replay") -> Stop:
    return Stop(Verdict(status=Status.REWARD_HACK, rule=rule, phase=phase, message=message,
                        compiled=True))  # fmt: skip


def parse(captured: Captured | None, run: CandidateRun) -> Recipe:
    """The captured recipe as records, checked against the mode; a Stop otherwise."""
    if captured is None or captured.raw is None:
        why = captured.error if captured is not None else "no recipe was recorded"
        raise _hack("unreplayable", f"forward's work could not be recorded for a replay: {why}")
    size = os.fstat(captured.fd).st_size if captured.fd is not None else 0
    try:
        recipe = parse_recipe(captured.raw, size)
    except RecipeError as exc:
        raise _hack("protocol_violation", f"the worker's recipe is malformed: {exc}") from None
    bad = allowed_steps(recipe, run.settings.mode)
    if bad:
        raise _hack(*bad)
    return recipe


def evidence(tools: JudgeTools, run: CandidateRun, captured: Captured | None) -> CandidateRun:
    """Replay the candidate's recipe in a fresh trusted replayer on fresh hidden inputs; a Stop
    unless every replay is correct. Returns the replayer's run (its session is to be timed and
    closed by the caller). Closes the captured blob."""
    try:
        recipe = parse(captured, run)
        try:
            kernels = kernel_module(run.source)
        except KernelRefused as exc:
            raise _hack("unreplayable", f"the kernels cannot be replayed alone: {exc}") from None
        bad = launch_arguments(recipe, kernels)
        if bad:
            raise _hack("unreplayable", bad)
        module = kernels.source
        t = time.monotonic()
        replayer = _start(tools, run)
        replayer.recipe = recipe
        try:
            _load(tools, run, replayer, module, captured)
        except BaseException:
            close(replayer)
            raise
        run.phases["replay_load"] += time.monotonic() - t
    finally:
        if captured is not None:
            captured.close()
    try:
        t = time.monotonic()
        for i in range(run.settings.replay_trials):
            check(tools, replayer, i)
        if run.settings.mode == "strict":
            trace(tools, replayer)
        run.phases["replay"] += time.monotonic() - t
    except BaseException:
        close(replayer)
        raise
    return replayer


def recipe_ops(recipe: Recipe) -> list[list[Any]]:
    """The recipe's PyTorch compute as `op_shapes` entries of judge/work.py ([name, shapes,
    dtypes, 1]): what the replay showed PyTorch doing, for hybrid mode's custom-kernel share.
    TensorList ops (`_foreach_*`, einsum's operands) count every tensor."""
    out: list[list[Any]] = []
    for op in recipe.ops():
        name = base_name(op.name)
        if name in GLUE:
            continue
        views = [v for x in (*op.args, *(v for _, v in op.kwargs)) for v in flatten(x)]
        views = [v for v in views if isinstance(v, View)]
        out.append([f"aten::{name}", [list(v.shape) for v in views], [v.dtype for v in views], 1])
    return out


def replayed_audit(recipe: Recipe, audit: Audit) -> Audit:
    """The verdict's audit with what the replay ran in place of the worker's word: the kernels
    launched, the launches of one call, the PyTorch compute and glue ops (violations and the
    epilogue stay as the in-process audit reported them: they may only reject)."""
    ops: dict[str, int] = {}
    glue: dict[str, int] = {}
    for op in recipe.ops():
        into = glue if base_name(op.name) in GLUE else ops
        name = f"aten::{base_name(op.name)}"
        into[name] = into.get(name, 0) + 1
    launches = recipe.launches()
    return audit.model_copy(
        update={
            "kernel_launches": len(launches),
            "kernels": sorted({step.kernel for step in launches}),
            "torch_ops": ops,
            "glue_ops": glue,
        }
    )


def _start(tools: JudgeTools, run: CandidateRun) -> CandidateRun:
    s = run.settings
    scratch = private_scratch() if s.sandbox == "rlimits" else None
    try:
        spec = worker_spec(s, run.device, scratch)
        server = tools.resources(run.device).ensure_server()
        session = Session(server, spec, s.limits.output_bytes)
    except BaseException:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    session.transport = Transport(run.device, s.transport)
    rr = CandidateRun(run.problem, run.source, s, run.device, session, run.ref, run.phases)
    rr.compiled, rr.scratch = True, scratch
    return rr


def close(rr: CandidateRun) -> None:
    """End a replayer: its process, transport and private scratch directory."""
    rr.session.close()
    if rr.scratch:
        shutil.rmtree(rr.scratch, ignore_errors=True)


def _load(
    tools: JudgeTools, run: CandidateRun, rr: CandidateRun, module: str, captured: Captured
) -> None:
    """Start the replay in `rr`: the kernel module, `rr.recipe` and the captured constants."""
    first = tools.case(run.phases, run.ref, tools.seed(run.problem, REPLAY_SEED), "native")
    shared, shared_fds = rr.session.transport.offer(first)
    req = ReplayLoad(
        device="cpu" if run.device == "cpu" else "cuda:0",
        module=module,
        recipe=rr.recipe,
        blob=captured.blob,
        shared=shared,
    )
    fd, captured.fd = captured.fd, None  # sent (and closed) with the request
    reply, extra = rr.ask(req, [fd, *shared_fds], run.settings.budgets.import_s, "replay")
    for x in extra:
        os.close(x)
    if isinstance(reply, Failure):
        raise Stop(_failed(reply, "the replay could not start"))
    rr.session.transport.accept(reply.shared)


# a replay that fails this way, after the candidate's own run of the same kernels passed, did
# not run what the candidate's process ran: a hack, not the candidate's honest failure
_DIVERGED = (Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.ILLEGAL_MEMORY_ACCESS, Status.CRASH)


def _failed(reply: Failure, what: str) -> Verdict:
    """A replayer's failure: `unreplayable` when the recipe cannot run, `replay_mismatch` when
    the kernels that ran in the candidate's process fail alone; out of time or memory it is
    named as the candidate's own run would be."""
    v = failure_verdict(reply, "replay", True)
    if v.status in (Status.INTERNAL_ERROR, Status.IMPORT_ERROR, Status.INIT_ERROR):
        return Verdict(status=Status.REWARD_HACK, rule="unreplayable", phase="replay",
                       compiled=True, message=f"{what}: {v.message}"[:4000])  # fmt: skip
    if v.status in _DIVERGED:
        return Verdict(status=Status.REWARD_HACK, rule="replay_mismatch", phase="replay",
                       compiled=True, message=f"{what}: the kernels, which ran in the "
                       f"candidate's process, failed when replayed alone ({v.status.value}): "
                       f"{v.message}"[:4000])  # fmt: skip
    v.message = f"{what}: {v.message}"
    return v


def check(
    tools: JudgeTools, rr: CandidateRun, i: int, case: tuple[Case, str] | None = None
) -> None:
    """One replay on fresh hidden inputs: trial `i`'s, or `case` (a case and its distribution:
    the re-check's after timing); compared here; a Stop if it is wrong."""
    s = rr.settings
    dist = case[1] if case is not None else s.distributions[i % len(s.distributions)]
    if case is not None:
        case = case[0]
    else:
        case = tools.case(rr.phases, rr.ref, tools.seed(rr.problem, REPLAY_SEED + 1 + i), dist)
    carry, carry_fds = rr.session.transport.send(case)
    reply, fds = rr.ask(ReplayRun(carry), carry_fds, s.budgets.correctness_s, "replay")
    if isinstance(reply, Failure):
        for fd in fds:
            os.close(fd)
        raise Stop(_failed(reply, f"replay {i + 1} on fresh inputs ({dist})"))
    outputs = rr.outputs(reply.outputs, fds)
    with judge_device(rr.device):
        status, mm, why = compare_to_reference(case, outputs, s, rr.problem)
    if status is not Status.CORRECT:
        mm.trial, mm.distribution = i, dist
        raise Stop(Verdict(
            status=Status.REWARD_HACK, rule="replay_mismatch", phase="replay", mismatch=mm,
            compiled=True, message=f"the candidate's kernels, replayed alone on fresh inputs "
            f"({dist}) by the judge's replayer, did not reproduce the outputs: {why}. The "
            "verdict rests on this replay: forward's work must be done by its own kernels, "
            "the same way on every call",
        ))  # fmt: skip
    if rr.session.transport.mutated(case, carry.shared):
        raise Stop(Verdict(status=Status.INPUT_MUTATED, phase="replay", compiled=True,
                           message="the replayed kernels modified their inputs in place"))  # fmt: skip


def trace(tools: JudgeTools, rr: CandidateRun) -> None:
    """Strict mode: every element of every output holds data the replayed kernels wrote in the
    call (sandbox/replay_provenance.py), traced on fresh inputs; again with a second poison
    for an output that the first left partly uncredited."""
    case = tools.case(rr.phases, rr.ref, tools.seed(rr.problem, REPLAY_SEED + 100), "native")
    credited: list[bool] | None = None
    for poison in POISONS:
        carry, carry_fds = rr.session.transport.send(case)
        req = ReplayTrace(carry, poison)
        reply, fds = rr.ask(req, carry_fds, rr.settings.budgets.correctness_s, "replay")
        for fd in fds:
            os.close(fd)
        if isinstance(reply, Failure):
            raise Stop(_failed(reply, "tracing the replay's outputs"))
        flags = list(reply.from_kernel)
        credited = flags if credited is None else [a or b for a, b in zip(credited, flags)]
        if all(credited):
            return
    bad = [i for i, ok in enumerate(credited or []) if not ok]
    raise _hack(
        "output_not_from_kernel",
        f"replayed alone, the kernels did not write every element of output(s) {bad}: in strict "
        "mode each output element must be written by a Triton kernel in this call (glue may "
        "copy kernel results, never stand in for them)",
    )
