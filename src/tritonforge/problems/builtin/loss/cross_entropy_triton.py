import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cross_entropy_row_kernel(x_ptr, target_ptr, loss_ptr, C, BLOCK: tl.constexpr):
    # One program per row of logits x [B, C]: loss[row] = logsumexp(x[row]) - x[row, target[row]],
    # with an online (max-rescaled) sum of exponentials over BLOCK-wide chunks.
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * C
    m = float("-inf")
    s = 0.0
    for c in range(0, C, BLOCK):
        offs = c + tl.arange(0, BLOCK)
        x = tl.load(x_row + offs, mask=offs < C, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    target = tl.load(target_ptr + row)
    x_target = tl.load(x_row + target).to(tl.float32)
    tl.store(loss_ptr + row, m + tl.log(s) - x_target)


@triton.jit
def mean_kernel(v_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # One program: deterministic mean of v [n].
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for c in range(0, n, BLOCK):
        offs = c + tl.arange(0, BLOCK)
        acc += tl.load(v_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / n)


class ModelNew(nn.Module):
    """Cross-entropy in Triton: per-row losses, then one program averages them."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = predictions.contiguous()
        t = targets.contiguous()
        B, C = x.shape
        row_loss = torch.empty(B, dtype=torch.float32, device=x.device)
        out = torch.empty((), dtype=torch.float32, device=x.device)
        BLOCK = min(triton.next_power_of_2(C), 4096)
        cross_entropy_row_kernel[(B,)](x, t, row_loss, C, BLOCK=BLOCK, num_warps=4)
        MEAN_BLOCK = min(triton.next_power_of_2(B), 1024)
        mean_kernel[(1,)](row_loss, out, B, BLOCK=MEAN_BLOCK)
        return out
