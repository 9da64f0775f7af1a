"""The Triton lm-head kernels (training.head_kernels, the "triton" chunk ops) against the eager
chunk functions: log-probs, logsumexp, entropy and both gradients, with and without entropy,
at a temperature, over a vocabulary that is not a multiple of the kernels' blocks.

Triton runs on the CPU only under its interpreter, which must be switched on before triton is
imported: the comparison runs in a subprocess (this file as a script)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _compare() -> dict:
    import torch

    from tritonforge.training.logprobs import EAGER, TRITON, chunked_token_logprobs

    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, 45, 24, generator=g).requires_grad_(True)
    weight = (torch.randn(5000, 24, generator=g) * 0.3).bfloat16().requires_grad_(True)
    targets = torch.randint(0, 5000, (2, 45), generator=g)
    targets[0, :6] = -100
    g_logp, g_ent = torch.randn(2, 45, generator=g), torch.randn(2, 45, generator=g)
    report: dict = {}
    for with_ent in (True, False):
        outs = []
        for ops in (EAGER, TRITON):
            logp, ent = chunked_token_logprobs(hidden, weight, targets, 16, 0.7, with_ent, ops)
            loss = (logp * g_logp).sum() + ((ent * g_ent).sum() if with_ent else 0.0)
            loss.backward()
            outs.append([logp.detach(), ent.detach() if with_ent else logp.detach(),
                         hidden.grad.clone(), weight.grad.float().clone()])  # fmt: skip
            hidden.grad = weight.grad = None
        names = ("logp", "entropy", "d_hidden", "d_weight")
        report[f"ent={with_ent}"] = {
            n: float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp(min=1e-9))
            for n, a, b in zip(names, *outs)
        }
    return report


def test_triton_head_matches_eager_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(Path(__file__).parent)}
    proc = subprocess.run(
        [sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for case, errs in report.items():
        for name, err in errs.items():
            # the same fp32 math (exp and sums may differ in the last bits); the logits'
            # gradient is rounded to bf16 before its matmuls: one-ulp flips (2^-8) there
            assert err < (2e-2 if name.startswith("d_") else 1e-5), (case, name, err)


@pytest.mark.parametrize("name,cuda,expect", [("triton", False, "EAGER"), ("auto", False, "EAGER"),
                                              ("eager", True, "EAGER")])  # fmt: skip
def test_head_ops_choice_on_the_cpu(name, cuda, expect):
    import torch

    from tritonforge.training import logprobs

    got = logprobs.head_ops(name, cuda, torch.device("cpu"))
    assert got is getattr(logprobs, expect) or (cuda and got is logprobs.compiled_ops())


if __name__ == "__main__":
    print(json.dumps(_compare()))
