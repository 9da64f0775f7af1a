"""What a verdict says beside its status: notes on properties of the problem and the candidate
that a reader (or a model) needs to interpret it.

Covers: `explain(v, run)`, which returns them as `verdicts.Remarks` (verdicts.finish puts them on
the verdict): a nondeterministic reference (and how it was judged), a degenerate problem
(measured once per problem: degenerate.py; the fact goes on `Verdict.degenerate`, which the
rewards read), a PyTorch epilogue accepted in hybrid mode, libdevice under the CPU interpreter.
Does not cover: deciding anything (decide.py, trials.py, gpu_timing.py).
"""

from __future__ import annotations

from tritonforge.evaluation.judge.candidate import CandidateRun
from tritonforge.evaluation.judge.decide import fmt_ops
from tritonforge.evaluation.judge.degenerate import degeneracy
from tritonforge.evaluation.judge.problem_check import STAT_RUNS
from tritonforge.evaluation.judge.verdicts import Remarks
from tritonforge.types import Status, Verdict

LIBDEVICE_ON_CPU = (
    "the CPU Triton interpreter has no libdevice (libdevice.tanh, .erf, .pow, ... exist only "
    "when compiling for a GPU): use triton.language equivalents to judge on the CPU, or judge "
    "on a GPU"
)


def explain(v: Verdict, run: CandidateRun) -> Remarks:
    """The notes (and flags) that apply to `v`, judged on `run`."""
    notes: list[str] = []
    why = run.ref.nondeterministic
    if why:
        notes.append(
            f"the reference is nondeterministic ({why}): outputs were compared by statistics "
            f"(mean, std, mean |x| of each output, within the spread of {STAT_RUNS} reference "
            "runs on the same inputs), not element by element"
        )
    found = degeneracy(run.ref)
    if found.degenerate:
        notes.append(
            f"degenerate problem (measured): {found.reason}; a speedup on it earns no reward "
            "(correctness only)"
        )
    if v.status is Status.CORRECT and v.audit is not None and v.audit.epilogue_ops:
        notes.append(
            f"PyTorch epilogue after the kernels ({fmt_ops(v.audit.epilogue_ops)}): a final "
            "reduction or scale of the kernel's output, O(output) work; allowed in hybrid "
            "mode, rule torch_epilogue in strict mode"
        )
    failed_to_run = v.status in (Status.COMPILE_ERROR, Status.RUNTIME_ERROR)
    if run.device == "cpu" and "libdevice" in run.source and failed_to_run:
        notes.append(LIBDEVICE_ON_CPU)
    return Remarks(tuple(notes), bool(why), found.reason if found.degenerate else None)
