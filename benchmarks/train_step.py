"""One GRPO step of a Qwen3-0.6B-shaped random-init model: time, tokens/s, peak memory, MFU.

Runs the real trainer (`RLTrainer`: micro-batches of whole samples, gradient checkpointing,
chunked log-probs, AdamW, grad clip) and a naive baseline (plain transformers forward with
full-vocabulary logits, fp32 log-softmax, same batch), which may run out of memory: that is
caught and reported. Prints one JSON object (also written to --out).

MFU = 6 * N * tokens / step_time / peak, N = all parameters (tied embedding counted once: it is
the lm-head matmul), tokens = input positions per step, peak = 989e12 (H200/H100 dense bf16).
It counts neither the recompute of gradient checkpointing nor attention score FLOPs;
`mfu_with_attention` adds 6 * n_layers * seq * (heads * head_dim) per token (causal QK^T and PV,
forward + backward).

    python benchmarks/train_step.py                      # H200: 8 x 8192 tokens, bf16
    python benchmarks/train_step.py --tiny               # CPU smoke test of the same code
    python benchmarks/train_step.py --modes naive --naive-micro 8
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

PEAK_BF16 = 989e12


def qwen3_config(tiny: bool) -> Any:
    from transformers import Qwen3Config

    if tiny:
        return Qwen3Config(
            vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, intermediate_size=192, tie_word_embeddings=True,
        )  # fmt: skip
    return Qwen3Config(  # Qwen3-0.6B shapes
        vocab_size=151936, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, intermediate_size=3072, tie_word_embeddings=True,
        max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1_000_000.0,
    )  # fmt: skip


def make_model(config: Any, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        lm = Qwen3ForCausalLM(config)
    return lm.to(dtype)


def make_batch(n: int, seq: int, prompt: int, vocab: int) -> list[Any]:
    """n samples of seq + 1 tokens (seq input positions), loss on all but the prompt."""
    from tritonforge.training.batching import TrainSequence

    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        ids = torch.randint(0, vocab, (seq + 1,), generator=g).tolist()
        mask = [0] * prompt + [1] * (seq + 1 - prompt)
        adv = 1.0 if i % 2 else -1.0
        out.append(
            TrainSequence(ids, mask, [adv * m for m in mask], [-1.0 * m for m in mask], 0, i)
        )
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def reset_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None


def summarize(times: list[float], tokens: int, params: int, attn_flops: float, device) -> dict:
    t = statistics.median(times)
    flops = 6 * params * tokens
    return {
        "status": "ok",
        "step_s": round(t, 4),
        "step_s_all": [round(x, 4) for x in times],
        "tokens_per_s": round(tokens / t, 1),
        "peak_mem_gib": round(peak_gib(device), 2) if peak_gib(device) is not None else None,
        "mfu": round(flops / t / PEAK_BF16, 4),
        "mfu_with_attention": round((flops + attn_flops) / t / PEAK_BF16, 4),
    }


def run_trainer(args, config, device, master_fp32: bool) -> dict:
    from tritonforge.config.train import TrainerConfig
    from tritonforge.training.rl import RLTrainer

    reset_memory(device)
    cfg = TrainerConfig.model_validate({
        "model": {"dtype": "bf16", "master_fp32": master_fp32, "gradient_checkpointing": True},
        "optim": {"lr": 1e-6, "grad_clip": 1.0},
        "batch": {"micro_batch_tokens": args.seq * args.micro, "max_seq_len": args.seq + 1,
                  "chunk_tokens": args.chunk},
        "loss": {"type": "grpo"},
        "rl": {"log_entropy": True},
    })  # fmt: skip
    lm = make_model(config, device, torch.float32 if master_fp32 else torch.bfloat16)
    trainer = RLTrainer(cfg, model=lm)
    batch = make_batch(args.samples, args.seq, args.prompt, config.vocab_size)
    times = []
    for i in range(args.warmup + args.steps):
        sync(device)
        t0 = time.perf_counter()
        m = trainer.train_step(batch)
        sync(device)
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    out = {"loss": m.loss, "grad_norm": m.grad_norm, "entropy": m.loss_metrics.get("entropy")}
    del trainer, lm
    return {**out, "times": times}


def naive_step(lm, opt, batch, micro: int, device) -> float:
    """Plain HF: full logits, fp32 log-softmax, GRPO-style token-mean loss, one AdamW step."""
    from tritonforge.training.batching import collate

    n_tok = sum(s.num_scored for s in batch)
    loss_sum = 0.0
    for k in range(0, len(batch), micro):
        mb = collate(batch[k : k + micro]).to(device)
        logits = lm(
            input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False
        ).logits
        logp = torch.log_softmax(logits.float(), dim=-1)
        logp = logp.gather(-1, mb.targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        loss = -(logp * mb.advantages * mb.mask).sum() / n_tok
        loss.backward()
        loss_sum += float(loss)
        del logits, logp, loss
    torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss_sum


def run_naive(args, config, device, micro: int) -> dict:
    from tritonforge.training.model import enable_gradient_checkpointing

    reset_memory(device)
    lm = make_model(config, device, torch.bfloat16).train()
    lm.config.use_cache = False
    enable_gradient_checkpointing(lm)
    opt = torch.optim.AdamW(lm.parameters(), lr=1e-6)
    batch = make_batch(args.samples, args.seq, args.prompt, config.vocab_size)
    times = []
    try:
        for i in range(args.warmup + args.steps):
            sync(device)
            t0 = time.perf_counter()
            loss = naive_step(lm, opt, batch, micro, device)
            sync(device)
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
        return {"loss": loss, "times": times}
    finally:
        del lm, opt


def attention_flops(config, seq: int, tokens: int) -> float:
    width = config.num_attention_heads * config.head_dim
    return 6.0 * config.num_hidden_layers * seq * width * tokens  # causal: half of 12


def guarded(fn, *a) -> dict:
    try:
        return fn(*a)
    except torch.cuda.OutOfMemoryError as exc:
        return {"status": "oom", "error": str(exc).splitlines()[0][:300], "times": []}
    except RuntimeError as exc:
        if "out of memory" not in str(exc).lower():
            raise
        return {"status": "oom", "error": str(exc).splitlines()[0][:300], "times": []}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny model on CPU (smoke test)")
    p.add_argument("--samples", type=int, default=None, help="samples per step (default 8; tiny 2)")
    p.add_argument(
        "--seq", type=int, default=None, help="input tokens per sample (default 8192; tiny 64)"
    )
    p.add_argument("--prompt", type=int, default=None, help="prompt tokens (no loss) per sample")
    p.add_argument("--micro", type=int, default=1, help="samples per trainer micro-batch")
    p.add_argument("--chunk", type=int, default=1024, help="lm-head chunk tokens")
    p.add_argument("--modes", default="trainer,trainer_pure_bf16,naive")
    p.add_argument("--naive-micro", default="1,8", help="naive micro-batch sizes to try")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = p.parse_args(argv)
    args.samples = args.samples or (2 if args.tiny else 8)
    args.seq = args.seq or (64 if args.tiny else 8192)
    args.prompt = args.prompt if args.prompt is not None else args.seq // 16
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import transformers

    device = torch.device("cpu" if args.tiny or not torch.cuda.is_available() else "cuda")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    config = qwen3_config(args.tiny)
    with torch.device("meta"):
        from transformers import Qwen3ForCausalLM

        params = sum(p.numel() for p in Qwen3ForCausalLM(config).parameters())
    tokens = args.samples * args.seq
    attn = attention_flops(config, args.seq, tokens)
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "params": params,
        "samples": args.samples,
        "seq": args.seq,
        "tokens_per_step": tokens,
        "mfu_formula": "6 * params * tokens / step_s / 989e12 (no recompute, no attention)",
        "results": {},
    }
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for mode in modes:
        if mode in ("trainer", "trainer_pure_bf16"):
            res = guarded(
                _timed_trainer, args, config, device, mode == "trainer", tokens, params, attn
            )
            report["results"][f"{mode}_micro{args.micro}"] = res
        elif mode == "naive":
            for micro in [int(x) for x in args.naive_micro.split(",")]:
                res = guarded(_timed_naive, args, config, device, micro, tokens, params, attn)
                report["results"][f"naive_micro{micro}"] = res
        print(json.dumps({mode: "done"}), file=sys.stderr, flush=True)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


def _timed_trainer(args, config, device, master_fp32, tokens, params, attn) -> dict:
    out = run_trainer(args, config, device, master_fp32)
    return {**summarize(out.pop("times"), tokens, params, attn, device), **out}


def _timed_naive(args, config, device, micro, tokens, params, attn) -> dict:
    out = run_naive(args, config, device, micro)
    return {**summarize(out.pop("times"), tokens, params, attn, device), **out}


if __name__ == "__main__":
    sys.exit(main())
