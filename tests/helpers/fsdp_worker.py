"""Worker for test_fsdp.py: a few RL or SFT steps on a tiny Qwen3 built in code (same seed on
every rank), under torchrun (FSDP2, gloo) or as one plain process. Writes losses and the final
full parameters to OUT (rank 0)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


def tiny_model() -> torch.nn.Module:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=128, head_dim=16, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    return Qwen3ForCausalLM(cfg).float()


def sequences(step: int, n: int = 7):
    from tritonforge.training.batching import TrainSequence

    g = torch.Generator().manual_seed(100 + step)
    out = []
    for i in range(n):
        t = int(torch.randint(6, 40, (1,), generator=g))
        ids = torch.randint(0, 512, (t,), generator=g).tolist()
        p = int(torch.randint(2, 5, (1,), generator=g))
        mask = [0] * p + [1] * (t - p)
        a = float(torch.randn(1, generator=g))
        out.append(
            TrainSequence(ids, mask, [a * m for m in mask], [-6.0 * m for m in mask], index=i)
        )
    return out


def main(mode: str, out: str) -> None:
    from tritonforge.config.train import SFTRunConfig, TrainerConfig
    from tritonforge.training.distributed import barrier, destroy_distributed, init_distributed

    ctx = init_distributed(device="cpu")
    batch = {"micro_batch_tokens": 48, "chunk_tokens": 16}
    losses = []
    if mode.startswith("rl"):
        from tritonforge.training.rl import RLTrainer

        loss = {"type": "gspo" if mode == "rl_gspo" else "grpo"}
        cfg = TrainerConfig.model_validate(
            {
                "optim": {"lr": 1e-2, "eps": 1e-3},
                "batch": batch,
                "loss": loss,
                "rl": {"num_minibatches": 2, "ppo_epochs": 2},
            }
        )
        trainer = RLTrainer(cfg, model=tiny_model(), run_dir=Path(out).parent / "run", ctx=ctx)
        for step in range(2):
            losses.append(trainer.train_step(sequences(step)).loss)
        trainer.save_weights()
        trainer.checkpoint()
        core = trainer.core
    else:
        from tritonforge.jobs.sft_data import TokenizedExample
        from tritonforge.training.sft import SFTTrainer

        cfg = SFTRunConfig.model_validate({"optim": {"lr": 1e-2, "eps": 1e-3}, "batch": batch})
        trainer = SFTTrainer(cfg, model=tiny_model(), ctx=ctx)
        for step in range(2):
            ex = [TokenizedExample(s.token_ids, s.loss_mask) for s in sequences(step)]
            losses.append(trainer.train_step(ex)["loss"])
        core = trainer.core
    state = core.full_state_dict()
    if ctx.is_main:
        torch.save({k: v.detach().cpu().float() for k, v in state.items()}, out)
        Path(out + ".json").write_text(json.dumps({"losses": losses, "world": ctx.world_size}))
    # every rank reaches the teardown together: in one clean-clone CI run (2026-12-02) rank 1 tore
    # its gloo group down while rank 0 was still saving and died of SIGABRT ("terminate called
    # without an active exception"); 3 reruns passed, so the race is rare
    barrier(ctx)
    destroy_distributed()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
