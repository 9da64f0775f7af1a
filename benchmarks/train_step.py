"""GRPO steps of Qwen3-shaped random-init models: time, tokens/s, peak memory, MFU, agreement.

One time-boxed command for the GPU machine. In order, each phase under its own deadline and
the JSON rewritten after every result (so a killed run still leaves what it measured):
  1. device facts (versions, cuDNN, SDPA kernel order, bf16 matmul rate)
  2. attention kernels over packed rows at the first shape (benchmarks/train_attention.py):
     each backend's fwd+bwd time and its error against per-sample SDPA; the fastest working
     uniform and ragged backends are used below
  3. per shape: first shape (0.6b) runs the naive transformers step (full fp32 logits), the
     trainer as it was (padded, eager, checkpointed), packed eager, packed + compiled (the fast
     path: fp32 masters and pure bf16), the fast path with ragged attention, and the agreement
     of the fast path with the padded, uncompiled path (loss, log-probs, every gradient); other
     shapes run the fast path, retrying with more checkpointed layers after an OOM
  4. with --pairs N, after the other shapes and within the first shape's budget: N more rounds
     of the naive step and then the best of the first shape's main variants, each a fresh
     model, and the ratio of each round (how much the same-run ratio moves from round to round
     on this machine)
FLOP accounting: benchmarks/train_parts.py (mfu = 6 N tokens / step / 989e12; with attention
adds 6 L s (heads * head_dim) tokens for causal attention within samples).

    python3 benchmarks/train_step.py --shapes 0.6b,1.7b,4b --out OUT.json     # H200
    python3 benchmarks/train_step.py --shapes 0.6b --variants fast_keep_logits --pairs 5
    python3 benchmarks/train_step.py --tiny                                    # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import bench_common as bc
import torch
import train_parts as tp
from train_attention import attention_phase
from train_check import agreement

TARGET_MFU, TARGET_RATIO = 0.40, 0.4


def run_trainer(args, shape: str, config, device, v: dict, deadline: float, ctx: dict) -> dict:
    from tritonforge.training.rl import RLTrainer

    tp.reset_memory(device)
    cfg = tp.trainer_config(args, args.seq, v)
    lm = tp.make_model(config, device, tp.param_dtype_of(v))
    trainer = RLTrainer(cfg, model=lm)
    batch = tp.make_batch(args.samples, args.seq, args.prompt, config.vocab_size)
    try:
        res = tp.time_steps(lambda: trainer.train_step(batch), device, args.warmup, args.steps,
                            deadline)  # fmt: skip
        m = res["last"]
        out = tp.summarize(res["times"], ctx["tokens"], ctx["flops"], ctx["peaks"])
        out.update(loss=m.loss, grad_norm=m.grad_norm, entropy=m.loss_metrics.get("entropy"),
                   first_step_s=res["first_step_s"], peak_mem_gib=tp.peak_gib(device),
                   host_prep_ms=tp.host_prep_ms(trainer, batch), settings=v,
                   dynamo=tp.dynamo_counters())  # fmt: skip
        if v.get("profile"):
            out["profile"] = tp.guarded(_profile, args, shape, device, trainer, batch, v)
        return out
    finally:
        trainer = lm = None  # frees the model before the next variant
        tp.reset_memory(device)


def _profile(args, shape: str, device, trainer, batch, v: dict) -> dict:
    name = v.get("name", "fast")
    suffix = "" if name == "fast" else f"_{name}"  # the fast path keeps its file name
    path = args.out_dir / f"profile_{shape}{suffix}.txt"
    with tp.profiled(True, device, path):
        trainer.train_step(batch)
        tp.sync(device)
    return {"status": "ok", "table": str(path)}


def run_naive(args, config, device, deadline: float, ctx: dict) -> dict:
    """Plain transformers: one sample per micro-batch, full-vocabulary fp32 log-softmax,
    gradient checkpointing (transformers'), GRPO-style token-mean loss, AdamW."""
    from tritonforge.training.batching import collate
    from tritonforge.training.model import enable_gradient_checkpointing

    tp.reset_memory(device)
    lm = tp.make_model(config, device, torch.bfloat16).train()
    lm.config.use_cache = False
    enable_gradient_checkpointing(lm)
    opt = torch.optim.AdamW(lm.parameters(), lr=1e-6)
    batch = tp.make_batch(args.samples, args.seq, args.prompt, config.vocab_size)
    n_tok = sum(s.num_scored for s in batch)

    def step() -> float:
        total = 0.0
        for s in batch:
            mb = collate([s]).to(device)
            logits = lm(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits
            logp = torch.log_softmax(logits.float(), dim=-1)
            logp = logp.gather(-1, mb.targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            loss = -(logp * mb.advantages * mb.mask).sum() / n_tok
            loss.backward()
            total += float(loss)
            del logits, logp, loss
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return total

    try:
        res = tp.time_steps(step, device, args.warmup, args.steps, deadline)
        out = tp.summarize(res["times"], ctx["tokens"], ctx["flops"], ctx["peaks"])
        return {**out, "loss": res["last"], "peak_mem_gib": tp.peak_gib(device)}
    finally:
        lm = opt = None  # frees the model before the next variant
        tp.reset_memory(device)


def best_config(args, attn: dict, micro: int) -> dict:
    """The fast path as this round configures it: bf16 parameters with fp32 masters in the
    optimizer, the Triton lm head over chunks of `args.big_chunk`, compiled layers."""
    return {"compile": args.compile, "micro_tokens": micro, "uniform": attn["uniform"],
            "ragged": attn["ragged"], "where": "optimizer", "head": "triton",
            "chunk": args.big_chunk}  # fmt: skip


def first_shape_variants(args, attn: dict) -> tuple[list, list]:
    """(essential, extra) variants of the first shape; extras run after the other shapes.
    `agree` marks the variant whose configuration the agreement check runs (True: the first of
    them that runs; "own": this one as well, under `agreement_<name>`)."""
    best = best_config(args, attn, args.big_micro)
    round1 = {"compile": args.compile, "micro_tokens": args.micro_tokens, "head": "compiled",
              "uniform": attn["uniform"], "ragged": attn["ragged"]}  # fmt: skip
    essential = [
        ("fast", {**best, "profile": args.profile, "agree": True}),
        (
            "fast_keep_logits",
            {**best, "head": "triton_keep", "profile": args.profile, "agree": "own"},
        ),
        ("fast_compiled_head", {**best, "head": "compiled", "chunk": args.chunk, "agree": True}),
        ("fast_half_micro", {**best, "micro_tokens": args.big_micro // 2, "agree": True}),
    ]  # same shapes first: a new micro-batch size recompiles the layers (then dynamic)
    extra = [  # after the other shapes (round 1 measured these)
        ("fast_round1", round1),  # fp32 masters as parameters (autocast), as measured before
        ("packed_eager", {**round1, "compile": "off"}),
        ("fast_pure_bf16", {**best, "master": False, "where": "params"}),
        ("trainer_before", {"packing": False, "ckpt": 10**6, "micro_tokens": args.seq, "chunk": 1024,
                            "head": "eager"}),
    ]  # fmt: skip
    if args.variants is not None:
        essential, extra = ([x for x in vs if x[0] in args.variants] for vs in (essential, extra))
    return essential, extra


VARIANTS = ("fast", "fast_keep_logits", "fast_compiled_head", "fast_half_micro", "fast_round1",
            "packed_eager", "fast_pure_bf16", "trainer_before")  # fmt: skip


def other_shape_ladder(
    args, shape: str, attn: dict, compile_ok: bool, head: str = "triton"
) -> list[dict]:
    """The fast path, then with more layers checkpointed after an OOM. 4b: one sample per
    micro-batch and half its layers checkpointed from the start (64 GB of fp32 weights, grads
    and Adam states leave about 70 GB; its activations are ~100 KB per token and layer)."""
    micro = args.seq if shape == "4b" else args.micro_tokens
    base = {**best_config(args, attn, micro), "compile": args.compile if compile_ok else "off"}
    if head == "compiled":  # the Triton head failed on the first shape
        base.update(head=head, chunk=args.chunk)
    else:
        base["head"] = head
    n_layers = tp.SHAPES[shape]["num_hidden_layers"]
    ladder = [base, {**base, "ckpt": n_layers // 2}, {**base, "ckpt": n_layers}]
    return ladder[1:] if shape == "4b" else ladder


def ladder_head(results: dict) -> str:
    """The lm head the other shapes run: triton_keep where keeping the logits made the first
    shape's step faster than recomputing them, triton where the Triton head ran there (or ran
    out of memory), else compiled."""
    fast, keep = results.get("fast", {}), results.get("fast_keep_logits", {})
    if keep.get("status") == "ok" and keep["step_s"] < fast.get("step_s", float("inf")):
        return "triton_keep"
    ran = ("ok", "oom")
    triton = ("fast", "fast_half_micro", "fast_keep_logits")
    return "triton" if any(results.get(k, {}).get("status") in ran for k in triton) else "compiled"


def _context(args, shape: str, report: dict) -> tuple[Any, dict, dict]:
    """The shape's config and result slot. Dynamo starts afresh per shape: otherwise the new
    hidden sizes would turn the layer graph dynamic (a realistic run compiles one shape)."""
    tp.reset_dynamo()
    config = tp.qwen3_config(shape)
    params = tp.count_params(config)
    tokens = args.samples * args.seq
    ctx = {"tokens": tokens, "flops": tp.flops(config, params, args.seq, tokens),
           "peaks": report["device_facts"]}  # fmt: skip
    res = report["shapes"].setdefault(shape, {"params": params, "tokens_per_step": tokens,
                                              "results": {}})  # fmt: skip
    return config, ctx, res


def _no_time(args, deadline: float, v: dict) -> bool:
    """Too little time left to start `v`: a compiled variant needs ~30 s (compile caches are
    warm after the first one; round 1: first steps of 6-18 s), others ~15 s."""
    need = 30.0 if v.get("compile") == "on" and not args.tiny else 15.0
    return time.monotonic() > deadline or args.deadline - time.monotonic() < need


def _shape_deadline(args, shape: str) -> float:
    """A shape phase's deadline: its budget (--budget, else 240 s), within the run's."""
    return min(args.deadline, time.monotonic() + args.shape_budget_s.get(shape, 240))


def _deadline(args, shape_deadline: float) -> float:
    """One variant's deadline: 150 s, within its shape's and the run's budget."""
    return min(shape_deadline, args.deadline, time.monotonic() + 150)


def run_variants(args, shape, device, report, variants, with_naive: bool) -> None:
    config, ctx, res = _context(args, shape, report)
    deadline = _shape_deadline(args, shape)
    if with_naive:
        res["results"]["naive_micro1"] = tp.guarded(
            run_naive, args, config, device, _deadline(args, deadline), ctx
        )
        write(args, report)
    for name, v in variants:
        if _no_time(args, deadline, v):
            res["results"][name] = {"status": "skipped_time"}
            continue
        v = {**v, "name": name}
        out = res["results"][name] = tp.guarded(
            run_trainer, args, shape, config, device, v, _deadline(args, deadline), ctx
        )
        write(args, report)
        if name == "fast" and out.get("status") == "error":
            v = _retry_attention(args, report, v)  # the chosen kernel may fail inside the model
            if v is not None and not _no_time(args, deadline, v):
                out = res["results"]["fast_default_attention"] = tp.guarded(
                    run_trainer, args, shape, config, device, v, _deadline(args, deadline), ctx
                )
                write(args, report)
        _check_agreement(args, config, device, report, res, name, v, out)
    res["verdict"] = verdict(res["results"], args)


def _check_agreement(args, config, device, report, res, name, v, out) -> None:
    """The agreement check of variant `name` where its `agree` asks for one (see
    first_shape_variants) and it ran, with 30 s of the run left."""
    key = "agreement" if v and v.get("agree") is True else f"agreement_{name}"
    wanted = bool(v and v.get("agree")) and out.get("status") == "ok"
    if not wanted or res.get(key, {}).get("status") == "ok":
        return
    if args.deadline - time.monotonic() > 30:
        res[key] = {**tp.guarded(agreement, args, config, device, v), "variant": name}
        write(args, report)


def run_pairs(args, shape, device, report) -> None:
    """`args.pairs` rounds of the naive step, then the best trainer variant of the first
    shape's main variants (their verdict) with the settings it ran with, each on a fresh model;
    the ratio of each round and their spread. Within the first shape's budget, after the other
    shapes (so they keep theirs)."""
    res = report["shapes"][shape]
    best = res.get("verdict", {}).get("best")
    ran = res.get("results", {}).get(best or "", {})
    if ran.get("status") != "ok" or "settings" not in ran:
        res["pairs"] = {"status": "no_trainer_result"}
        return
    settings = {k: v for k, v in ran["settings"].items() if k not in ("agree", "profile")}
    config, ctx, _ = _context(args, shape, report)
    deadline = _shape_deadline(args, shape)
    rounds: list[dict] = []
    res["pairs"] = {"variant": best, "rounds": rounds}
    for _ in range(args.pairs):
        if deadline - time.monotonic() < 45:
            res["pairs"]["stopped"] = "time"
            break
        naive = tp.guarded(run_naive, args, config, device, _deadline(args, deadline), ctx)
        v = {**settings, "name": best, "profile": False}
        fast = tp.guarded(
            run_trainer, args, shape, config, device, v, _deadline(args, deadline), ctx
        )
        if naive.get("status") != "ok" or fast.get("status") != "ok":
            rounds.append({"naive": naive.get("status"), "trainer": fast.get("status")})
        else:
            rounds.append({"naive_s": naive["step_s"], "trainer_s": fast["step_s"],
                           "ratio": round(fast["step_s"] / naive["step_s"], 3)})  # fmt: skip
        write(args, report)
    ratios = [r["ratio"] for r in rounds if "ratio" in r]
    if ratios:
        res["pairs"].update(n=len(ratios), ratio_median=round(statistics.median(ratios), 3),
                            ratio_min=min(ratios), ratio_max=max(ratios),
                            met=sum(r <= TARGET_RATIO for r in ratios))  # fmt: skip


def _retry_attention(args, report: dict, v: dict) -> dict | None:
    """After the fast path failed: the same with torch's own kernel choices (sdpa, auto), if it
    used others; later shapes use them too."""
    if v.get("uniform") in ("auto", "sdpa") and v.get("ragged") == "auto":
        return None
    report["attention"]["chosen"] = {"uniform": "auto", "ragged": "auto"}
    return {**v, "uniform": "auto", "ragged": "auto", "profile": False}


def run_ladder(args, shape, device, report, attn: dict, compile_ok: bool, head: str) -> None:
    config, ctx, res = _context(args, shape, report)
    deadline = _shape_deadline(args, shape)
    for i, v in enumerate(other_shape_ladder(args, shape, attn, compile_ok, head)):
        if _no_time(args, deadline, v):
            res["results"][f"fast_try{i}"] = {"status": "skipped_time"}
            break
        out = tp.guarded(
            run_trainer, args, shape, config, device, v, _deadline(args, deadline), ctx
        )
        res["results"][f"fast_try{i}"] = out
        write(args, report)
        if out.get("status") != "oom":
            break


def verdict(results: dict, args=None) -> dict:
    """The issue's targets for the fastest trainer result of the first shape, with the trainer
    configuration that ran it (`best_config`: the model and batch sections a user sets)."""
    naive = results.get("naive_micro1", {}).get("step_s")
    fast = [(r["step_s"], k) for k, r in results.items()
            if r.get("status") == "ok" and k.startswith(("fast", "packed"))]  # fmt: skip
    if not fast:
        return {"status": "no_trainer_result"}
    step, name = min(fast)
    mfu = results[name]["mfu_with_attention"]
    ratio = step / naive if naive else None
    out = {"best": name, "mfu_with_attention": mfu, "step_over_naive": ratio and round(ratio, 3),
           "mfu_target_met": mfu >= TARGET_MFU,
           "speed_target_met": ratio is not None and ratio <= TARGET_RATIO}  # fmt: skip
    settings = results[name].get("settings")
    if args is not None and settings is not None:
        cfg = tp.trainer_config(args, args.seq, settings)
        out["best_config"] = cfg.model_dump(mode="json", include={"model", "batch", "optim"})
    return out


def device_facts(device: torch.device) -> dict:
    import transformers

    facts: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__}
    if device.type == "cuda":
        import triton

        facts.update(
            device=torch.cuda.get_device_name(), triton=triton.__version__,
            cudnn=torch.backends.cudnn.version(), matmul_tflops=tp.matmul_tflops(device),
            sdp_priority=[str(b) for b in getattr(torch._C, "_get_sdp_priority_order", list)()],
        )  # fmt: skip
    else:
        facts["device"] = "cpu"
    return facts


def write(args, report: dict) -> None:
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny model on CPU (smoke test)")
    p.add_argument("--shapes", default="0.6b,1.7b,4b", help="model shapes (first: full study)")
    p.add_argument("--samples", type=int, default=None, help="samples per step (default 8)")
    p.add_argument("--seq", type=int, default=None, help="input tokens per sample (8192)")
    p.add_argument("--prompt", type=int, default=None, help="prompt tokens (no loss) per sample")
    p.add_argument("--micro-tokens", type=int, default=None, help="tokens per micro-batch")
    p.add_argument("--chunk", type=int, default=None, help="lm-head chunk tokens (round 1)")
    p.add_argument("--big-micro", type=int, default=None, help="micro-batch tokens, best config")
    p.add_argument("--big-chunk", type=int, default=None, help="lm-head chunk, best config")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--budget", default="0.6b=220,1.7b=120,4b=140", help="seconds per shape phase")
    p.add_argument("--total", type=float, default=430.0, help="seconds for the whole run")
    p.add_argument(
        "--compile", default=None, choices=["on", "off"], help="fast path (default on; --tiny off)"
    )
    p.add_argument("--profile", action="store_true", help="torch.profiler table of the fast path")
    p.add_argument("--variants", default=None, help="first shape: only these (comma-separated)")
    p.add_argument("--pairs", type=int, default=0, help="rounds of naive + best after the main run")
    p.add_argument("--out", type=Path, default=None, help="write the JSON here (after each result)")
    args = p.parse_args(argv)
    if args.tiny:
        args.shapes = "tiny,tiny2"
    args.shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    if args.variants is not None:
        args.variants = bc.known_names(p, "--variants", args.variants, VARIANTS)
    if args.pairs < 0:
        p.error("--pairs must be >= 0")
    args.samples = args.samples or (3 if args.tiny else 8)
    args.seq = args.seq or (64 if args.tiny else 8192)
    args.prompt = args.prompt if args.prompt is not None else args.seq // 16
    args.micro_tokens = args.micro_tokens or 2 * args.seq
    args.chunk = args.chunk or (32 if args.tiny else 4096)
    args.big_micro = args.big_micro or args.samples * args.seq  # the whole step: one micro-batch
    args.big_chunk = args.big_chunk or 2 * args.chunk
    args.shape_budget_s = {k: float(v) for k, v in (x.split("=") for x in args.budget.split(","))}
    args.shape_budget_s.setdefault("tiny", 600.0)
    args.shape_budget_s.setdefault("tiny2", 600.0)
    args.out_dir = args.out.parent if args.out else Path(".")
    args.compile = args.compile or ("off" if args.tiny else "on")
    args.deadline = time.monotonic() + args.total
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    device = torch.device("cpu" if args.tiny or not torch.cuda.is_available() else "cuda")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    report: dict[str, Any] = {
        "samples": args.samples, "seq": args.seq, "micro_tokens": args.micro_tokens,
        "flop_formula": tp.__doc__.split("\n\n", 1)[1].strip(), "peak_flops": tp.PEAK_BF16,
        "targets": {"mfu_with_attention": TARGET_MFU, "step_over_naive": TARGET_RATIO},
        "device_facts": device_facts(device), "shapes": {},
    }  # fmt: skip
    write(args, report)
    report["attention"] = tp.guarded(attention_phase, args, args.shapes[0], device)
    attn = report["attention"].get("chosen", {"uniform": "auto", "ragged": "auto"})
    write(args, report)
    first = args.shapes[0]
    plan = [(first, "essential")] + [(s, "ladder") for s in args.shapes[1:]]
    plan += [(first, "pairs")] * bool(args.pairs) + [(first, "extra")]
    for shape, kind in plan:
        attn = report["attention"].get("chosen", attn)  # a failed fast path resets it
        if kind == "ladder":  # compile only where the first shape's fast path compiled
            results = report["shapes"].get(first, {}).get("results", {})
            names = ("fast", "fast_default_attention", "fast_half_micro", "fast_compiled_head")
            statuses = {results[k].get("status") for k in names if k in results}
            job = (run_ladder, (attn, bool(statuses & {"ok", "oom"}), ladder_head(results)))
        elif kind == "pairs":
            job = (run_pairs, ())
        else:
            essential, extra = first_shape_variants(args, attn)
            job = (run_variants, (essential if kind == "essential" else extra, kind == "essential"))
        failed = tp.guarded(job[0], args, shape, device, report, *job[1])
        if failed:
            report["shapes"].setdefault(shape, {}).setdefault("errors", []).append(failed)
        write(args, report)
        print(json.dumps({shape: kind, "left_s": round(args.deadline - time.monotonic())}),
              file=sys.stderr, flush=True)  # fmt: skip
    print(summary(report), flush=True)
    return 0


def summary(report: dict) -> str:
    """A few lines with the numbers that matter (the JSON holds everything)."""
    lines = [f"device {report['device_facts']}", f"attention {report['attention'].get('chosen')}"]
    for name, r in report.get("attention", {}).get("backends", {}).items():
        lines.append(f"  attn {name:12s} ok={r.get('ok')} ms={r.get('fwd_bwd_ms')} "
                     f"tflops={r.get('tflops')} err={r.get('max_rel_error')} {r.get('error', '')[:160]}")  # fmt: skip
    for shape, res in report["shapes"].items():
        for name, r in res.get("results", {}).items():
            keys = ("status", "step_s", "tokens_per_s", "mfu", "mfu_with_attention",
                    "mfu_vs_matmul", "peak_mem_gib", "first_step_s")  # fmt: skip
            vals = " ".join(f"{k}={r.get(k)}" for k in keys if k in r)
            lines.append(f"{shape} {name:22s} {vals} {r.get('error', '')[:200]}")
        for key in [k for k in res if k.startswith("agreement")] + ["verdict", "pairs", "errors"]:
            if key in res:
                lines.append(f"{shape} {key}: {json.dumps(res[key], default=str)[:600]}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
