"""Packed attention: every CPU backend equals per-sequence attention, the document block mask is
exact, and the installed HF attention leaves unpacked calls unchanged."""

from __future__ import annotations

import json

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch.utils._python_dispatch import TorchDispatchMode

from helpers.train import tiny_lm
from tritonforge.training import attention
from tritonforge.training.packing import PackedInputs

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

D = torch.float64


def packed(lengths: list[int]) -> PackedInputs:
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(lengths).cumsum(0)
    n = sum(lengths)
    ids = torch.zeros(1, n, dtype=torch.long)
    uniform = lengths[0] if len(set(lengths)) == 1 else 0
    return PackedInputs(ids, ids.clone(), cu, max(lengths), uniform)


def qkv(n: int, heads: int = 4, kv: int = 2, dim: int = 8, seed: int = 0, dtype=D):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(1, n, h, dim, generator=g, dtype=dtype).transpose(1, 2).requires_grad_(True)
        for h in (heads, kv, kv)
    ]


def reference(q, k, v, lengths: list[int]) -> torch.Tensor:
    """Block-diagonal causal mask over the whole row, keys/values repeated to every head."""
    n, groups = q.shape[2], q.shape[1] // k.shape[1]
    doc = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    pos = torch.arange(n)
    allowed = (doc[:, None] == doc[None, :]) & (pos[:, None] >= pos[None, :])
    k, v = (x.repeat_interleave(groups, dim=1) for x in (k, v))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed).transpose(1, 2)


@pytest.mark.parametrize(
    "backend,lengths",
    [("loop", [5, 11, 1, 7]), ("loop", [6, 6, 6]), ("sdpa", [6, 6, 6]), ("sdpa", [16])],
)
def test_backend_equals_per_sequence_attention_with_gradients(backend, lengths):
    row = packed(lengths)
    q, k, v = qkv(sum(lengths))
    r = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    kw = attention.packing_kwargs(row, backend)
    out = attention.PACKED_ATTENTION[backend](q, k, v, kw, 0.3)
    ref = _ref_scaled(r, lengths, 0.3)
    assert out.shape == (1, sum(lengths), 4, 8)
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(ref)
    out.backward(g)
    ref.backward(g)
    for a, b in zip((q, k, v), r):
        torch.testing.assert_close(a.grad, b.grad)


def _ref_scaled(r, lengths, scale):
    """The reference at softmax scale `scale` (SDPA's default is dim ** -0.5)."""
    q, k, v = r
    return reference(q * (scale * q.shape[-1] ** 0.5), k, v, lengths)


def test_flex_forward_equals_per_sequence_attention():
    lengths = [5, 130, 1, 70, 50]  # spans several 128-token blocks, one sequence crosses two
    row = packed(lengths)
    q, k, v = (x.detach().float() for x in qkv(sum(lengths)))
    kw = attention.packing_kwargs(row, "flex")
    with torch.no_grad():
        out = attention.PACKED_ATTENTION["flex"](q, k, v, kw, 8**-0.5)
        ref = reference(q, k, v, lengths)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("lengths", [[5, 130, 1, 70, 50], [256, 256], [300], [1, 2, 3, 400]])
def test_document_block_mask_is_exact(lengths):
    row = packed(lengths)
    n = row.num_tokens
    bm = attention.document_block_mask(row.cu_seqlens, n, block=128)
    doc = attention.document_ids(row.cu_seqlens, n)
    expect = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    assert doc.tolist() == expect.tolist()
    pos = torch.arange(n)
    allowed = (doc[:, None] == doc[None, :]) & (pos[:, None] >= pos[None, :])
    nb = -(-n // 128)
    # out-of-range positions (past n) count as masked for "any", as allowed for "all": flex
    # never computes them, so a block whose valid part is all allowed may be "full"
    out_of_range = torch.ones(nb * 128, nb * 128, dtype=torch.bool)
    out_of_range[:n, :n] = False
    padded = torch.zeros(nb * 128, nb * 128, dtype=torch.bool)
    padded[:n, :n] = allowed
    any_b = padded.view(nb, 128, nb, 128).any(dim=(1, 3))
    all_b = (padded | out_of_range).view(nb, 128, nb, 128).all(dim=(1, 3))
    dense = bm.to_dense()[0, 0].bool()  # partial and full blocks
    assert torch.equal(dense, any_b)
    full = torch.zeros(nb, nb, dtype=torch.bool)
    nums, idx = bm.full_kv_num_blocks[0, 0], bm.full_kv_indices[0, 0]
    for i in range(nb):
        full[i, idx[i, : nums[i]].long()] = True
    assert torch.equal(full, all_b & ~torch.eye(nb, dtype=torch.bool))  # diagonal: never full


def test_resolve_and_availability_on_cpu():
    cpu = torch.device("cpu")
    assert attention.resolve("auto", "auto", 64, cpu) == "sdpa"
    assert attention.resolve("auto", "same", 64, cpu) == "loop"
    assert attention.resolve("auto", "auto", 0, cpu) == "loop"
    assert attention.resolve("flex", "sdpa_cudnn", 0, cpu) == "flex"
    # CUDA-only kernels named on the CPU fall back to what runs here
    assert attention.resolve("auto", "sdpa_flash", 32, cpu) == "sdpa"
    assert attention.resolve("varlen", "auto", 0, cpu) == "loop"
    assert attention.resolve("auto", "sdpa_cudnn", 0, cpu) == "loop"
    assert not attention.available("varlen", cpu) and not attention.available("sdpa_cudnn", cpu)
    assert attention.available("loop", cpu) and not attention.available("nope", cpu)


def test_installed_attention_keeps_unpacked_calls_and_exports(tmp_path):
    lm = tiny_lm()
    ids = torch.randint(0, 512, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    with torch.no_grad():
        before = lm(input_ids=ids, attention_mask=mask).logits
        name = attention.install(lm)
        assert name == "tritonforge_sdpa" and attention.install(lm) == name
        after = lm(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(before, after)
    lm.save_pretrained(tmp_path)
    assert "tritonforge" not in (tmp_path / "config.json").read_text()
    assert "attn_implementation" not in json.loads((tmp_path / "config.json").read_text())


def test_mask_function_builds_nothing_for_packed_forwards():
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    lm = tiny_lm()
    name = attention.install(lm)
    fn = ALL_MASK_ATTENTION_FUNCTIONS[name]
    kwargs = dict(batch_size=1, q_length=4, kv_length=4, allow_is_causal_skip=False)
    from transformers.masking_utils import causal_mask_function

    assert fn(mask_function=causal_mask_function, **kwargs) is not None
    with attention.packed_masks():
        assert fn(mask_function=causal_mask_function, **kwargs) is None
    assert fn(mask_function=causal_mask_function, **kwargs) is not None


class _SdpaCalls(TorchDispatchMode):
    """Records the strides of every SDPA backward call's output gradient and output."""

    def __init__(self) -> None:
        super().__init__()
        self.backward: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if "scaled_dot_product" in str(func) and "backward" in str(func):
            grad_out, out = args[0], args[4]  # (grad_out, q, k, v, out, ...)
            self.backward.append((grad_out.stride(), out.stride()))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("backend,lengths", [("loop", [5, 11, 16]), ("sdpa", [8, 8, 8])])
def test_sdpa_backends_hand_the_kernel_a_gradient_laid_out_like_its_output(backend, lengths):
    """The output gradient reaches the SDPA backward in the layout of the kernel's output, even
    when it arrives non-contiguous (cuDNN's cached backward graphs fix that layout)."""
    row = packed(lengths)
    q, k, v = qkv(sum(lengths), dtype=torch.float32)
    out = attention.PACKED_ATTENTION[backend](q, k, v, attention.packing_kwargs(row, backend), 0.3)
    assert out.is_contiguous()
    g = torch.randn(out.shape[::-1]).permute(3, 2, 1, 0)  # non-contiguous, same values layout-free
    with _SdpaCalls() as calls:
        out.backward(g)
    assert calls.backward and all(go == o for go, o in calls.backward), calls.backward


def test_sdpa_backends_run_outside_compiled_graphs():
    row = packed([8, 8, 8])
    q, k, v = qkv(24, dtype=torch.float32)
    kw = attention.packing_kwargs(row, "sdpa")
    fn = torch.compile(lambda q, k, v: attention.PACKED_ATTENTION["sdpa"](q * 2, k, v, kw, 0.3))
    torch._dynamo.reset()
    counters.clear()
    torch.testing.assert_close(
        fn(q, k, v), attention.PACKED_ATTENTION["sdpa"](q * 2, k, v, kw, 0.3)
    )
    assert any("compiler.disable" in reason for reason in counters["graph_break"])


def test_loop_offsets_stay_on_the_host():
    row = packed([5, 11, 16])
    kw = attention.packing_kwargs(row, "loop")
    assert kw["tf_bounds"].device.type == "cpu" and kw["tf_bounds"].tolist() == [0, 5, 16, 32]
