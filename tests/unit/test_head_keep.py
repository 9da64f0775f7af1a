"""The lm head with kept logits (training.head_keep, `TRITON_KEEP`) against the recompute path
(`TRITON`) and the eager chunk functions: loss, log-probs, entropies and both gradients, with
and without entropy, at a temperature; which path runs when; a second backward refused.

The Triton kernels run on the CPU only under the interpreter, switched on before triton is
imported: those comparisons run in a subprocess (this file as a script)."""

from __future__ import annotations

import json

import pytest
import torch

from helpers.interpret import run_interpreted
from helpers.train import lm_head_case
from tritonforge.training import head_keep
from tritonforge.training.logprobs import EAGER, ChunkOps, chunked_token_logprobs, head_ops


def _run(ops, with_ent: bool) -> dict:
    hidden, weight, targets, g_logp, g_ent = lm_head_case()
    logp, ent = chunked_token_logprobs(hidden, weight, targets, 16, 0.7, with_ent, ops)
    loss = (logp * g_logp).sum() + ((ent * g_ent).sum() if with_ent else 0.0)
    node = _head_node(logp.grad_fn)
    loss.backward()
    return {"loss": loss.detach(), "logp": logp.detach(), "entropy": ent.detach() if with_ent
            else logp.detach(), "d_hidden": hidden.grad, "d_weight": weight.grad.float(),
            "node": node}  # fmt: skip


def _head_node(fn) -> str:
    """The name of the lm head's autograd node under `fn`."""
    todo, seen = [fn], set()
    while todo:
        f = todo.pop()
        if f is None or f in seen:
            continue
        seen.add(f)
        if "Logprobs" in type(f).__name__:
            return type(f).__name__
        todo.extend(nxt for nxt, _ in f.next_functions)
    return "none"


def _compare() -> dict:
    from tritonforge.training.logprobs import TRITON, TRITON_KEEP

    report: dict = {}
    for with_ent in (True, False):
        keep, recompute, eager = (_run(ops, with_ent) for ops in (TRITON_KEEP, TRITON, EAGER))
        for ref_name, ref in (("recompute", recompute), ("eager", eager)):
            report[f"ent={with_ent} vs {ref_name}"] = {
                n: float((keep[n] - ref[n]).abs().max() / ref[n].abs().max().clamp(min=1e-9))
                for n in ("loss", "logp", "entropy", "d_hidden", "d_weight")
            }
        report[f"ent={with_ent} nodes"] = [keep["node"], recompute["node"]]
    report["second_backward"] = _second_backward(TRITON_KEEP)
    report["row_blocks"] = _row_blocks()
    return report


def _row_blocks() -> dict:
    """KeptLogprobs with cuBLAS calls of 16 rows (6 blocks of 84 scored positions) against one
    call: the same log-probs, entropies and hidden gradient; the weight gradient summed over
    blocks in fp32 instead of rounded once."""
    hidden, weight, targets, g_logp, g_ent = lm_head_case()
    keep = targets.reshape(-1) >= 0
    tgt = targets.reshape(-1)[keep]
    outs = []
    for rows in (10**9, 16):
        h = hidden.reshape(-1, hidden.shape[-1])[keep]
        logp, ent = head_keep.KeptLogprobs.apply(h, weight, tgt, 0.7, True, rows)
        dh, dw = torch.autograd.grad(
            (logp * g_logp.reshape(-1)[keep]).sum() + (ent * g_ent.reshape(-1)[keep]).sum(),
            (hidden, weight),
        )
        outs.append((logp.detach(), ent.detach(), dh, dw.float()))
    names = ("logp", "entropy", "d_hidden", "d_weight")
    return {n: float((a - b).abs().max() / b.abs().max()) for n, a, b in zip(names, *outs)}


def _second_backward(ops) -> str:
    hidden, weight, targets, g_logp, _ = lm_head_case()
    logp, _ = chunked_token_logprobs(hidden, weight, targets, 16, 1.0, False, ops)
    loss = (logp * g_logp).sum()
    loss.backward(retain_graph=True)
    try:
        loss.backward()
    except RuntimeError as exc:
        return str(exc)
    return "no error"


def test_kept_logits_match_recompute_and_eager_under_the_interpreter():
    report = run_interpreted(__file__)
    for with_ent in (True, False):
        assert report[f"ent={with_ent} nodes"] == [
            "KeptLogprobsBackward",
            "_ChunkedLogprobsBackward",
        ]
        for ref in ("recompute", "eager"):
            errs = report[f"ent={with_ent} vs {ref}"]
            for name, err in errs.items():
                # against recompute: the same kernels on the same bf16 logits, only the weight
                # gradient is rounded to bf16 once instead of per chunk (then summed in fp32);
                # against eager: fp32 math in another order, and the logits' gradient is bf16
                # before its matmuls: ulp flips (2^-8) there
                if ref == "recompute":
                    limit = 1e-2 if name == "d_weight" else 1e-6
                else:
                    limit = 2e-2 if name.startswith("d_") else 1e-5
                assert err < limit, (with_ent, ref, name, err)
    assert "retain_graph" in report["second_backward"]
    blocks = report["row_blocks"]
    assert blocks["logp"] == blocks["entropy"] == blocks["d_hidden"] == 0.0, blocks
    assert 0.0 < blocks["d_weight"] < 1e-2, blocks  # rounded per block, not once


class _Recorder:
    def __init__(self, answer: bool) -> None:
        self.answer, self.calls = answer, []

    def __call__(self, rows, vocab, dtype, device) -> bool:
        self.calls.append((rows, vocab, dtype, device.type))
        return self.answer


def test_no_room_falls_back_to_recompute_with_the_same_results():
    """A `keep` predicate that says no: the chunked recompute path runs (eager ops here, so no
    Triton is needed) and gives exactly what the plain eager ops give."""
    said_no = _Recorder(False)
    got = _run(ChunkOps(EAGER.forward, EAGER.backward, keep=said_no), True)
    ref = _run(EAGER, True)
    assert said_no.calls == [(84, 5000, torch.bfloat16, "cpu")]  # 2 x 45 - 6 scored, once
    assert got["node"] == "_ChunkedLogprobsBackward"
    for name in ("loss", "logp", "entropy", "d_hidden", "d_weight"):
        assert torch.equal(got[name], ref[name]), name


def test_nothing_is_kept_without_a_backward_to_come():
    hidden, weight, targets, _, _ = lm_head_case()
    asked = _Recorder(True)
    ops = ChunkOps(EAGER.forward, EAGER.backward, keep=asked)
    with torch.no_grad():
        logp, _ = chunked_token_logprobs(hidden, weight, targets, 16, 1.0, False, ops)
    chunked_token_logprobs(hidden.detach(), weight.detach(), targets, 16, 1.0, False, ops)
    assert asked.calls == [] and logp.grad_fn is None


GIB = 2**30


@pytest.mark.parametrize(
    "need,free,cached,total,min_bytes,expect",
    [(10, 30, 0, 100, 10, True), (10, 19, 0, 100, 10, False), (10, 15, 5, 100, 10, True),
     (1, 7 * GIB, 0, 64 * GIB, 4 * GIB, True), (1, 6 * GIB, 0, 64 * GIB, 4 * GIB, False),
     (1, 4 * GIB, 0, 16 * GIB, 4 * GIB, False), (1, 4 * GIB, GIB, 16 * GIB, 4 * GIB, True)],
)  # fmt: skip
def test_room_keeps_a_reserve(need, free, cached, total, min_bytes, expect):
    """Kept only with a tenth of the device (at least `min_bytes`) left free beside them."""
    assert head_keep.room_for(need, free, cached, total, 0.1, min_bytes) is expect


def test_logits_fit_counts_bytes_and_the_cpu_always_fits():
    assert head_keep.logits_bytes(61448, 151936, torch.bfloat16) == 61448 * 151936 * 2
    assert head_keep.logits_fit(10**6, 10**6, torch.float32, torch.device("cpu"))


def test_triton_keep_is_chosen_on_cuda_only():
    from tritonforge.training import logprobs

    assert head_ops("triton_keep", False, torch.device("cpu")) is EAGER
    assert head_ops("triton_keep", True, torch.device("cpu")) is logprobs.compiled_ops()
    assert head_ops("triton_keep", False, torch.device("cuda")) is logprobs.TRITON_KEEP
    assert head_ops("triton", False, torch.device("cuda")) is logprobs.TRITON


def test_auto_head_is_triton_keep_on_cuda_and_the_old_choice_elsewhere(monkeypatch):
    """auto: the kept-logits Triton head on CUDA (the fastest in the trainer benchmark), else
    compiled with compiled layers, else eager; without Triton, CUDA falls back the same way."""
    from tritonforge.training import logprobs

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert head_ops("auto", False, cuda) is logprobs.TRITON_KEEP
    assert head_ops("auto", True, cuda) is logprobs.TRITON_KEEP
    assert head_ops("auto", True, cpu) is logprobs.compiled_ops()
    assert head_ops("auto", False, cpu) is EAGER
    monkeypatch.setattr(logprobs, "_triton_imports", lambda: False)
    assert head_ops("auto", True, cuda) is logprobs.compiled_ops()
    assert head_ops("auto", False, cuda) is EAGER


if __name__ == "__main__":
    print(json.dumps(_compare()))
