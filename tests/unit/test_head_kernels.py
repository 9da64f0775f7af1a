"""The Triton lm-head kernels (training.head_kernels, the "triton" chunk ops) against the eager
chunk functions: log-probs, logsumexp, entropy and both gradients, with and without entropy,
at a temperature, over a vocabulary that is not a multiple of the kernels' blocks.

Triton runs on the CPU only under its interpreter, which must be switched on before triton is
imported: the comparison runs in a subprocess (this file as a script)."""

from __future__ import annotations

import json

import pytest

from helpers.interpret import run_interpreted
from helpers.train import lm_head_case


def _compare() -> dict:
    from tritonforge.training.logprobs import EAGER, TRITON, chunked_token_logprobs

    hidden, weight, targets, g_logp, g_ent = lm_head_case()
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
    report = run_interpreted(__file__)
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
