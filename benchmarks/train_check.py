"""Agreement of the fast training path with the padded, uncompiled one, for train_step.py.

Two copies of the same random-init model: one in a TrainCore as the benchmark's fast variant
configures it (packed rows, compiled layers and lm head), one in a plain PolicyModel (one padded
sample per micro-batch, eager, no packing). Both compute the same loss on the benchmark batch,
a weighted NLL plus an entropy term, so log-probs, entropies and every gradient matter:
    loss = -sum(logp * mask * (1 + adv / 2)) / n + 0.01 * sum(entropy * mask) / n
Reported: the loss difference, log-prob differences on scored tokens, and per-parameter and
global relative L2 errors and cosine of the gradients, with pass flags at bf16 tolerances.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
import train_parts as tp

TOL = {"loss_rel": 1e-2, "logp_mean_abs": 2e-2, "grad_rel": 6e-2, "grad_cos": 0.998}


def _loss_and_grads(policy, mbs, n_tok: float, device) -> tuple[float, dict[int, torch.Tensor]]:
    total, rows = 0.0, {}
    for mb in mbs:
        mb = mb.to(device)
        logp, ent = policy(mb, 1.0, True)
        w = mb.mask * (1 + 0.5 * mb.advantages)
        loss = -(logp * w).sum() / n_tok + 0.01 * (ent * mb.mask).sum() / n_tok
        loss.backward()
        total += float(loss)
        for r, idx in enumerate(mb.seq_index):
            rows[idx] = logp[r].detach()[mb.mask[r] > 0].float()
    return total, rows


def agreement(args, config, device: torch.device, variant: dict[str, Any]) -> dict:
    from tritonforge.training.batching import make_micro_batches
    from tritonforge.training.core import TrainCore
    from tritonforge.training.model import PolicyModel

    tp.reset_memory(device)
    cfg = tp.trainer_config(args, args.seq, variant)
    lm = tp.make_model(config, device, torch.float32)
    ref_lm = copy.deepcopy(lm)
    core = TrainCore(cfg.model, cfg.optim, cfg.batch, cfg.dist, lm=lm)
    ref = PolicyModel(ref_lm, args.chunk, torch.bfloat16, packing=False)
    seqs = tp.make_batch(args.samples, args.seq, args.prompt, config.vocab_size)
    n_tok = float(sum(s.num_scored for s in seqs))
    try:
        loss_f, rows_f = _loss_and_grads(core.policy, core.micro_batches(seqs), n_tok, device)
        padded = make_micro_batches(seqs, args.seq, core.pad_id)
        loss_r, rows_r = _loss_and_grads(ref, padded, n_tok, device)
        out = {"loss_fast": loss_f, "loss_reference": loss_r}
        out["loss_rel"] = abs(loss_f - loss_r) / max(abs(loss_r), 1e-12)
        diffs = torch.cat([(rows_f[i] - rows_r[i]).abs() for i in rows_r])
        out["logp_max_abs"], out["logp_mean_abs"] = float(diffs.max()), float(diffs.mean())
        out.update(_grad_stats(lm, ref_lm))
        out["pass"] = (
            out["loss_rel"] < TOL["loss_rel"] and out["logp_mean_abs"] < TOL["logp_mean_abs"]
            and out["grad_rel_global"] < TOL["grad_rel"] and out["grad_cos_global"] > TOL["grad_cos"]
        )  # fmt: skip
        out["tolerances"] = TOL
        return {"status": "ok", **out}
    finally:
        del core, ref, lm, ref_lm
        tp.reset_memory(device)


def _grad_stats(fast: torch.nn.Module, ref: torch.nn.Module) -> dict:
    grads_r = {n: p.grad for n, p in ref.named_parameters() if p.grad is not None}
    worst, dot, nf, nr, missing = (0.0, ""), 0.0, 0.0, 0.0, []
    for name, p in fast.named_parameters():
        g_r = grads_r.get(name)
        if p.grad is None or g_r is None:
            missing.append(name)
            continue
        a, b = p.grad.float(), g_r.float()
        rel = float((a - b).norm() / b.norm().clamp(min=1e-12))
        worst = max(worst, (rel, name))
        dot += float((a * b).sum())
        nf += float(a.pow(2).sum())
        nr += float(b.pow(2).sum())
    err2 = nf + nr - 2 * dot
    return {
        "grad_rel_global": math.sqrt(max(err2, 0.0) / max(nr, 1e-30)),
        "grad_cos_global": dot / math.sqrt(max(nf * nr, 1e-30)),
        "grad_rel_worst": worst[0],
        "grad_rel_worst_param": worst[1],
        "grads_missing": missing[:5],
    }
