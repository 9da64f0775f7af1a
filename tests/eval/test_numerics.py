"""The candidate's process computes under the judge's numeric settings (sandbox/numerics.py).

A reference whose output depends on the TF32 flags, judged against itself: the expected output
is computed in the judge, the candidate's in a sandboxed worker. Were the worker's flags torch's
defaults (cuDNN TF32 on), the two would differ; on an H200 exactly that failed 41 of 135
KernelBench references judged against themselves (every cuDNN convolution, at 1e-4).
"""

from __future__ import annotations

import subprocess
import sys

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.types import Problem, Status

FLAGS_REF = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        flags = torch.backends.cudnn.allow_tf32 + 2 * torch.backends.cuda.matmul.allow_tf32
        return torch.relu(x) + float(flags)

def get_inputs():
    return [torch.randn(8, 8)]

def get_init_inputs():
    return []
"""


def test_torch_defaults_would_differ() -> None:
    """The premise: a fresh process has cuDNN TF32 on (so the flags must be set, not assumed)."""
    code = "import torch; print(int(torch.backends.cudnn.allow_tf32))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"


def test_candidate_torch_code_runs_under_the_references_precision() -> None:
    problem = Problem(id="t/flags", suite="t", name="flags", reference_src=FLAGS_REF)
    candidate = FLAGS_REF.replace("class Model(", "class ModelNew(")
    with Evaluator(EvalSettings(device="cpu", mode="hybrid", require_custom_kernel=False)) as ev:
        v = ev.evaluate(problem, candidate)
    assert v.status is Status.CORRECT, (v.status, v.message)
