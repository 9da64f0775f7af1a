"""AdamW over bf16 parameters with fp32 master weights, fp32 gradient sums and fp32 moments.

Covers: `MasterAdamW`, the optimizer of `model.master_weights = "optimizer"`: the model holds
bf16 parameters (every op computes in bf16 without autocast's per-op casts, and the backward
writes bf16 gradients), while the optimizer keeps, per parameter, an fp32 master copy, an fp32
gradient sum and fp32 Adam moments.
  - `accumulate_grads()` after each micro-batch's backward adds the bf16 gradients into the
    fp32 sums (the first copies) and frees them, so gradient accumulation is fp32 as with fp32
    parameters under autocast (whose bf16 weight gradients are also cast up and summed in fp32);
  - `clip_grad_norm_` measures and clips the fp32 sums;
  - `step()` runs AdamW (decoupled weight decay) on the masters, torch's fused kernel when
    `fused` (`torch._fused_adamw_`, the kernel torch.optim.AdamW(fused=True) calls) or the same
    update in foreach ops, then rounds the masters to the bf16 parameters (round to nearest even).
Numerics against fp32 parameters + bf16 autocast: matmuls identical (both bf16 with fp32
accumulation, on the same bf16 values of the weights: rounded once per step here, cast per op
there); matmul weight gradients identical (bf16 out of the matmul, summed in fp32 over
micro-batches); masters, moments and the update identical (fp32). The differences: ops that
autocast leaves in fp32 with fp32 weights (the norm-weight multiply) run in bf16 here, and the
gradients of the other parameters (norm weights; a tied embedding's lookup and lm-head parts,
added by autograd) are rounded to bf16 once per micro-batch where autocast keeps them fp32.
tests/unit/test_master_adamw.py measures both modes against each other.
The state (`master`, `exp_avg`, `exp_avg_sq`, `step`) is ordinary per-parameter optimizer state,
so torch.distributed.checkpoint saves it under the parameters' names; `load_state_dict` keeps it
in fp32 (torch would cast it to the bf16 parameter dtype).
Does not cover: FSDP (sharded fp32 parameters under FSDP2 mixed precision are its masters),
amsgrad, maximize, capturable or complex parameters.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["MasterAdamW"]

Tensor = torch.Tensor
FP32_STATE = ("master", "exp_avg", "exp_avg_sq")


class MasterAdamW(torch.optim.Optimizer):
    """AdamW with fp32 masters for half-precision parameters (see the module docstring)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        fused: bool | None = None,
    ) -> None:
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "fused": bool(fused)}  # fmt: skip
        super().__init__(params, defaults)
        self._sums: dict[Tensor, Tensor] = {}  # fp32 gradient sums of this step (not state)

    def _params(self) -> list[Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    def _init_state(self, p: Tensor) -> dict[str, Any]:
        st = self.state[p]
        if "master" not in st:
            st["master"] = p.detach().float().clone()
            st["exp_avg"] = torch.zeros_like(st["master"])
            st["exp_avg_sq"] = torch.zeros_like(st["master"])
            st["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
        return st

    @torch.no_grad()
    def accumulate_grads(self) -> None:
        """Add the parameters' gradients into the fp32 sums and free them (after a backward)."""
        with_grad = [p for p in self._params() if p.grad is not None]
        adding = [p for p in with_grad if p in self._sums]  # dict lookup: by identity
        if adding:
            torch._foreach_add_([self._sums[p] for p in adding], [p.grad for p in adding])
        for p in with_grad:
            if p not in self._sums:
                self._sums[p] = p.grad.float()
            p.grad = None

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> Tensor:
        """Global L2 norm of the fp32 gradient sums; scales them to `max_norm` when above."""
        self.accumulate_grads()
        sums = list(self._sums.values())
        if not sums:
            return torch.zeros(())
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(sums)))
        if math.isfinite(max_norm):
            torch._foreach_mul_(sums, (max_norm / (norm + 1e-6)).clamp(max=1.0))
        return norm

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = closure() if closure is not None else None
        self.accumulate_grads()
        for group in self.param_groups:
            ps = [p for p in group["params"] if p in self._sums]
            if not ps:
                continue
            states = [self._init_state(p) for p in ps]
            masters, avgs, sqs, steps = ([s[k] for s in states] for k in
                                          ("master", "exp_avg", "exp_avg_sq", "step"))  # fmt: skip
            grads = [self._sums[p] for p in ps]
            torch._foreach_add_(steps, 1)
            update = _fused_update if group["fused"] else _foreach_update
            update(group, masters, grads, avgs, sqs, steps)
            torch._foreach_copy_(ps, masters)
        self._sums.clear()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the parameters' gradients and this step's fp32 sums."""
        super().zero_grad(set_to_none=True)
        self._sums.clear()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's loading, then the masters and moments restored in fp32 (torch casts floating
        state to the parameter's dtype, which would round them to bf16)."""
        super().load_state_dict(state_dict)
        saved_ids = itertools.chain.from_iterable(g["params"] for g in state_dict["param_groups"])
        for pid, p in zip(saved_ids, self._params()):
            for key in FP32_STATE:
                value = state_dict["state"].get(pid, {}).get(key)
                if value is not None:
                    self.state[p][key] = value.to(device=p.device, dtype=torch.float32)


def _fused_update(group: dict, masters, grads, avgs, sqs, steps) -> None:
    beta1, beta2 = group["betas"]
    torch._fused_adamw_(
        masters, grads, avgs, sqs, [], steps, lr=group["lr"], beta1=beta1, beta2=beta2,
        weight_decay=group["weight_decay"], eps=group["eps"], amsgrad=False, maximize=False,
        grad_scale=None, found_inf=None,
    )  # fmt: skip


def _foreach_update(group: dict, masters, grads, avgs, sqs, steps) -> None:
    """AdamW as torch.optim.AdamW computes it (decoupled weight decay, bias corrections)."""
    lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
    beta1, beta2 = group["betas"]
    if wd:
        torch._foreach_mul_(masters, 1 - lr * wd)
    torch._foreach_lerp_(avgs, grads, 1 - beta1)
    torch._foreach_mul_(sqs, beta2)
    torch._foreach_addcmul_(sqs, grads, grads, 1 - beta2)
    n = float(steps[0])  # a group's parameters step together
    bias1, bias2 = 1 - beta1**n, 1 - beta2**n
    denoms = torch._foreach_sqrt(sqs)
    torch._foreach_div_(denoms, math.sqrt(bias2))
    torch._foreach_add_(denoms, eps)
    torch._foreach_addcdiv_(masters, avgs, denoms, -lr / bias1)
