"""Chunked log-probs: equal to the full-logits computation in value and gradient, memory bounded."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tritonforge.training.logprobs import (
    _ChunkedLogprobs,
    chunked_token_logprobs,
    entropy_from_logits,
    token_logprobs_from_logits,
)

D = torch.float64


def naive(hidden, weight, targets, temperature=1.0):
    logits = hidden @ weight.t()
    return token_logprobs_from_logits(logits, targets, temperature), entropy_from_logits(
        logits, temperature
    )


def make(b=2, t=7, h=5, v=11, seed=0, dtype=D):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(b, t, h, generator=g, dtype=dtype)
    weight = torch.randn(v, h, generator=g, dtype=dtype)
    targets = torch.randint(0, v, (b, t), generator=g)
    return hidden, weight, targets


def test_token_logprobs_from_logits_by_hand():
    # logits [0, ln 2, ln 3] -> softmax [1/6, 2/6, 3/6]
    logits = torch.tensor([[[0.0, math.log(2), math.log(3)]] * 2], dtype=D)
    logp = token_logprobs_from_logits(logits, torch.tensor([[2, -100]]))
    assert logp[0].tolist() == pytest.approx([math.log(0.5), 0.0])
    ent = entropy_from_logits(logits)
    h = -sum(p * math.log(p) for p in (1 / 6, 2 / 6, 3 / 6))
    assert ent[0].tolist() == pytest.approx([h, h])


@pytest.mark.parametrize("chunk", [1, 3, 4, 14, 1024])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_values_and_gradients_match_full_logits(chunk, temperature):
    hidden, weight, targets = make()
    targets[0, 1] = -100  # ignored position
    gl, ge = torch.randn(2, 7, dtype=D), torch.randn(2, 7, dtype=D)

    h1, w1 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    logp, ent = chunked_token_logprobs(h1, w1, targets, chunk, temperature, compute_entropy=True)
    ((logp * gl).sum() + (ent * ge).sum()).backward()

    h2, w2 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    logp2, ent2 = naive(h2, w2, targets, temperature)
    ent2 = torch.where(targets >= 0, ent2, torch.zeros_like(ent2))
    ((logp2 * gl).sum() + (ent2 * ge).sum()).backward()

    torch.testing.assert_close(logp, logp2)
    torch.testing.assert_close(ent, ent2)
    torch.testing.assert_close(h1.grad, h2.grad)
    torch.testing.assert_close(w1.grad, w2.grad)
    assert logp[0, 1].item() == 0.0 and ent[0, 1].item() == 0.0
    assert h1.grad[0, 1].abs().max().item() == 0.0


def test_logprobs_only_gradients_match():
    hidden, weight, targets = make(seed=3)
    h1, w1 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    logp, ent = chunked_token_logprobs(h1, w1, targets, chunk_tokens=4)
    assert ent is None
    logp.sum().backward()
    h2, w2 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    naive(h2, w2, targets)[0].sum().backward()
    torch.testing.assert_close(h1.grad, h2.grad)
    torch.testing.assert_close(w1.grad, w2.grad)


def test_gradcheck_on_the_autograd_function():
    hidden, weight, targets = make(b=1, t=5, h=4, v=6, seed=1)
    h = hidden[0].clone().requires_grad_(True)
    w = weight.clone().requires_grad_(True)
    tg = targets[0]
    for entropy in (False, True):
        assert torch.autograd.gradcheck(
            lambda h, w, e=entropy: _ChunkedLogprobs.apply(h, w, tg, 2, 0.9, e)[: 2 if e else 1],
            (h, w),
        )


def test_gradient_to_hidden_only_or_weight_only():
    hidden, weight, targets = make(seed=4)
    h = hidden.clone().requires_grad_(True)
    chunked_token_logprobs(h, weight, targets, 3)[0].sum().backward()
    h2 = hidden.clone().requires_grad_(True)
    naive(h2, weight, targets)[0].sum().backward()
    torch.testing.assert_close(h.grad, h2.grad)
    w = weight.clone().requires_grad_(True)
    chunked_token_logprobs(hidden, w, targets, 3)[0].sum().backward()
    w2 = weight.clone().requires_grad_(True)
    naive(hidden, w2, targets)[0].sum().backward()
    torch.testing.assert_close(w.grad, w2.grad)


def test_bf16_weight_computes_in_fp32():
    hidden, weight, targets = make(b=2, t=16, h=32, v=50, seed=5, dtype=torch.float32)
    hb, wb = hidden.bfloat16().requires_grad_(True), weight.bfloat16().requires_grad_(True)
    logp, ent = chunked_token_logprobs(hb, wb, targets, 5, compute_entropy=True)
    assert logp.dtype == torch.float32 and ent.dtype == torch.float32
    ref_logp, ref_ent = naive(hb.detach().float(), wb.detach().float(), targets)
    torch.testing.assert_close(logp, ref_logp, atol=0.1, rtol=0.02)
    torch.testing.assert_close(ent, ref_ent, atol=0.1, rtol=0.02)
    logp.sum().backward()
    assert hb.grad.dtype == torch.bfloat16 and wb.grad.dtype == torch.bfloat16
    assert torch.isfinite(hb.grad.float()).all() and torch.isfinite(wb.grad.float()).all()


class _MaxNumel(TorchDispatchMode):
    """Records the largest tensor any aten op produces."""

    def __init__(self) -> None:
        super().__init__()
        self.max_numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for x in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(x, torch.Tensor):
                self.max_numel = max(self.max_numel, x.numel())
        return out


def test_memory_is_bounded_by_the_chunk():
    # N = 256 tokens, V = 1000: the full logits would hold 256 000 elements.
    b, t, h, v, chunk = 2, 128, 8, 1000, 8
    hidden, weight, targets = make(b, t, h, v, seed=6, dtype=torch.float32)
    hidden.requires_grad_(True)
    weight.requires_grad_(True)
    saved: list[int] = []

    def pack(x: torch.Tensor) -> torch.Tensor:
        saved.append(x.numel())
        return x

    with _MaxNumel() as mode, torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        logp, ent = chunked_token_logprobs(hidden, weight, targets, chunk, compute_entropy=True)
        (logp.sum() + ent.sum()).backward()
    bound = max(chunk * v, v * h, b * t * h)  # one chunk of logits, the weight, the hidden states
    assert mode.max_numel <= bound < b * t * v
    with _MaxNumel() as control:  # the probe does see full logits when they exist
        naive(hidden, weight, targets)[0].sum().backward()
    assert control.max_numel >= b * t * v
    # Nothing saved for backward is vocabulary-sized per token: inputs plus [N] vectors only.
    assert max(saved) <= max(v * h, b * t * h)


def test_function_saves_only_inputs_and_vectors():
    hidden, weight, targets = make(b=1, t=64, h=4, v=500, seed=7, dtype=torch.float32)
    h = hidden[0].requires_grad_(True)
    logp, _ = _ChunkedLogprobs.apply(h, weight.requires_grad_(True), targets[0], 16, 1.0, True)
    shapes = [tuple(x.shape) for x in logp.grad_fn.saved_tensors]
    assert shapes == [(64, 4), (500, 4), (64,), (64,), (64,)]


def test_bad_arguments_are_rejected():
    hidden, weight, targets = make()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        chunked_token_logprobs(hidden, weight, torch.full_like(targets, 11))
    with pytest.raises(ValueError, match="must be"):
        chunked_token_logprobs(hidden, weight[:, :3], targets)
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunked_token_logprobs(hidden, weight, targets, chunk_tokens=0)
