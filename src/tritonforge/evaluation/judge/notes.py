"""What a verdict says beside its status: notes on properties of the problem and the candidate
that a reader (or a model) needs to interpret it.

Covers: `explain(v, run)`: a nondeterministic reference (and how it was judged), a degenerate
problem (measured once per problem: degenerate.py; the fact goes on `Verdict.degenerate`, which
the rewards read), a PyTorch epilogue accepted in hybrid mode, libdevice under the CPU
interpreter. Does not cover: deciding anything (decide.py, evaluator.py).
"""

from __future__ import annotations

from tritonforge.evaluation.judge.candidate import CandidateRun
from tritonforge.evaluation.judge.decide import fmt_ops
from tritonforge.evaluation.judge.degenerate import degeneracy
from tritonforge.evaluation.judge.problem_check import STAT_RUNS
from tritonforge.types import Status, Verdict

LIBDEVICE_ON_CPU = (
    "the CPU Triton interpreter has no libdevice (libdevice.tanh, .erf, .pow, ... exist only "
    "when compiling for a GPU): use triton.language equivalents to judge on the CPU, or judge "
    "on a GPU"
)


def explain(v: Verdict, run: CandidateRun) -> None:
    """Add the notes (and flags) that apply to `v`."""
    why = run.ref.nondeterministic
    if why:
        v.reference_nondeterministic = True
        v.notes.append(
            f"the reference is nondeterministic ({why}): outputs were compared by statistics "
            f"(mean, std, mean |x| of each output, within the spread of {STAT_RUNS} reference "
            "runs on the same inputs), not element by element"
        )
    found = degeneracy(run.ref)
    if found.degenerate:
        v.degenerate = found.reason
        v.notes.append(
            f"degenerate problem (measured): {found.reason}; a speedup on it earns no reward "
            "(correctness only)"
        )
    if v.status is Status.CORRECT and v.audit is not None and v.audit.epilogue_ops:
        v.notes.append(
            f"PyTorch epilogue after the kernels ({fmt_ops(v.audit.epilogue_ops)}): a final "
            "reduction or scale of the kernel's output, O(output) work; allowed in hybrid "
            "mode, rule torch_epilogue in strict mode"
        )
    failed_to_run = v.status in (Status.COMPILE_ERROR, Status.RUNTIME_ERROR)
    if run.device == "cpu" and "libdevice" in run.source and failed_to_run:
        v.notes.append(LIBDEVICE_ON_CPU)
