"""What the phases of an evaluation use of the Evaluator, handed to them as one typed record.

Covers: `JudgeTools` (built by the Evaluator: the case builder that books its seconds, the hidden
seeds, the devices' resources, the transport counter, the work shares) and `Shares` (hybrid
mode's custom-kernel share: a trial's from the worker's op shapes, the replay's from the replayed
recipe's ops; the reference's own work profiled once per problem and device, here in the judge).
The phase modules (trials.py, replay.py, gpu_timing.py, phases.py) never see the Evaluator: what
they may call on it is what this record holds.
Does not cover: the phases themselves, the Evaluator's retries (evaluator.py), the work model
(work.py).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tritonforge.evaluation.judge.candidate import CandidateRun
from tritonforge.evaluation.judge.gpu_lock import judge_device
from tritonforge.evaluation.judge.reference import Case, Reference
from tritonforge.evaluation.judge.replies import AuditFacts
from tritonforge.evaluation.judge.resources import DeviceResources
from tritonforge.evaluation.judge.work import custom_share, reference_work
from tritonforge.evaluation.sandbox.protocol import map_tensors
from tritonforge.types import Problem


class Shares:
    """Hybrid mode's custom-kernel shares, with the references' own work measured once per
    (problem, device) and kept for the Evaluator's life."""

    def __init__(self) -> None:
        self._work: dict[tuple[str, str], float] = {}

    def trial(self, run: CandidateRun, case: Case, audit: AuditFacts) -> float | None:
        """Hybrid: the custom-kernel share of one trial by the worker's op shapes (its word: a
        minimum share may reject on it; the verdict's share comes from the replayed recipe,
        `replayed`)."""
        if not audit.ops:
            return 1.0  # PyTorch computed nothing
        if run.settings.mode != "hybrid":
            return None  # strict rejects the compute anyway; no shapes were recorded
        shapes = [[o.name, [list(x) for x in o.shapes], list(o.dtypes), o.count]
                  for o in audit.op_shapes]  # fmt: skip
        if not shapes:
            return custom_share(shapes, self._work.get((run.problem.id, run.device)))
        return custom_share(shapes, self.reference(run, case))

    def replayed(
        self, run: CandidateRun, ops: list[list[Any]], case: Callable[[], Case]
    ) -> float | None:
        """The share of the replayed recipe's PyTorch `ops` (replay.recipe_ops); `case` builds
        the case the reference's work is profiled on, if it has not been yet."""
        if not ops:
            return 1.0
        return custom_share(ops, self.reference(run, case()))

    def reference(self, run: CandidateRun, case: Case) -> float | None:
        """The reference's own compute work, profiled once per problem and device here."""
        key = (run.problem.id, run.device)
        if key not in self._work:
            began = time.monotonic()  # (a part of "check")
            with run.ref.lock, judge_device(run.device):
                inputs = [map_tensors(v, lambda t: t.clone()) for v in case.inputs]
                self._work[key] = reference_work(run.ref.model, inputs, run.device)
            run.phases["reference_profile"] += time.monotonic() - began
        return self._work.get(key)


@dataclass(frozen=True)
class JudgeTools:
    """The Evaluator's state an evaluation's phases may use (evaluator.Evaluator.tools)."""

    # a case of a reference (built, or from the cache); its seconds are added to phases["cases"]
    case: Callable[[defaultdict[str, float], Reference, int, str], Case]
    seed: Callable[[Problem, int], int]  # the hidden seed of a problem's trial `i`
    resources: Callable[[str], DeviceResources]  # a device's fork server, gate, timing process
    shares: Shares
    transport_used: Callable[[str], None]  # counts how one worker's tensors travel
