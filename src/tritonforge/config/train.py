"""Training configuration: model, optimizer, batching, RL loss, checkpoints, logging, SFT data.

Covers: the pydantic sections of the trainer (`TrainerConfig`, the `[train]` table of a run
config) and of the SFT command (`SFTRunConfig`), including `LossConfig` (moved here from
training.losses so configs stay torch-free; training.losses re-exports it).
Does not cover: anything that imports torch, the rollout/engine/evaluator sections (rollout.*,
config.eval) or the RL driver loop's own settings (its command owns them).

Loss names are validated against `LOSSES`, the loss registry: it names the built-in losses
lazily (their module, training.losses, registers them when imported; this module never imports
torch), and a loss registered at run time with `training.losses.register_loss` is in it too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from tritonforge.config import Section
from tritonforge.config.eval import EvalSettings
from tritonforge.config.registry import Registry
from tritonforge.config.rollout import ProblemsConfig
from tritonforge.config.task import FeedbackConfig, PromptConfig

__all__ = [
    "BUILTIN_LOSSES",
    "LOSSES",
    "BatchConfig",
    "CheckpointConfig",
    "DistConfig",
    "LoggingConfig",
    "LossConfig",
    "ModelConfig",
    "OptimConfig",
    "RLConfig",
    "RepairDataConfig",
    "SFTConfig",
    "SFTDataConfig",
    "SFTRunConfig",
    "TrainerConfig",
]

BUILTIN_LOSSES = ("grpo", "dr_grpo", "gspo", "grpo_tis", "gspo_tis")
# name -> loss function (training.losses); the built-in ones are registered when it is imported
LOSSES: Registry[Callable[..., Any]] = Registry(
    "loss", dict.fromkeys(BUILTIN_LOSSES, "tritonforge.training.losses"), unique=True
)
Aggregation = Literal["token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "constant_norm"]


class ModelConfig(Section):
    """Which Hugging Face causal LM to train and how to hold it."""

    path: str = Field("runs/tiny-model", description="HF model dir (config + weights + tokenizer).")
    tokenizer_path: str | None = Field(None, description="Tokenizer dir; None uses `path`.")
    reference_path: str | None = Field(
        None, description="Reference model for KL (loaded only when kl_coef > 0); None = `path`."
    )
    dtype: Literal["fp32", "bf16"] = Field("fp32", description="Compute dtype.")
    master_fp32: bool = Field(
        True,
        description="With bf16: keep fp32 parameters and AdamW states and compute in bf16 "
        "(autocast, or FSDP2 mixed precision); False trains pure bf16 (tiny updates round away).",
    )
    master_weights: Literal["auto", "params", "optimizer"] = Field(
        "auto",
        description="With bf16 and master_fp32, where the fp32 masters live: params (fp32 "
        "parameters, bf16 autocast compute) or optimizer (bf16 parameters and gradients; the "
        "optimizer keeps fp32 masters, fp32 gradient sums over micro-batches and fp32 Adam "
        "moments: no per-op casts, the same update). auto: optimizer in one process, params "
        "under FSDP (whose mixed precision keeps fp32 shards as the masters).",
    )
    gradient_checkpointing: bool = Field(False, description="Recompute decoder layers in backward.")
    checkpoint_layers: int | None = Field(
        None,
        ge=0,
        description="With gradient_checkpointing: how many decoder layers (spread evenly) to "
        "recompute; None = all. Fewer trade memory for speed.",
    )
    compile: Literal["auto", "on", "off"] = Field(
        "auto",
        description="torch.compile each decoder layer and the lm-head chunks; auto = on CUDA.",
    )
    attn_implementation: str = Field(
        "sdpa", description="HF attention backend: sdpa | eager | flash_attention_2 | ..."
    )
    trust_remote_code: bool = False


class OptimConfig(Section):
    """AdamW, learning-rate schedule and gradient clipping."""

    lr: float = Field(1e-5, gt=0)
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = Field(0.0, ge=0, description="Not applied to 1-D params (norms, biases).")
    eps: float = Field(1e-8, gt=0)
    schedule: Literal["constant", "cosine", "linear"] = "constant"
    warmup_steps: int = Field(0, ge=0, description="Linear warmup from 0 over these steps.")
    total_steps: int | None = Field(
        None, ge=1, description="Optimizer steps of the run; needed by cosine/linear decay."
    )
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="Decay floor as a fraction of lr.")
    grad_clip: float = Field(1.0, ge=0, description="Max global grad norm; 0 disables clipping.")
    fused: bool | None = Field(
        None, description="Fused AdamW kernel; None = fused on CUDA, foreach elsewhere."
    )

    @model_validator(mode="after")
    def _decay_needs_total(self) -> OptimConfig:
        if self.schedule != "constant" and self.total_steps is None:
            raise ValueError(f"schedule {self.schedule!r} needs optim.total_steps")
        return self


class BatchConfig(Section):
    """Micro-batching under a token budget and chunked log-probs."""

    micro_batch_tokens: int = Field(
        8192,
        ge=1,
        description="Tokens per micro-batch: packed, the real tokens of its sequences; padded, "
        "rows x longest row. A longer sequence still gets a micro-batch of its own.",
    )
    packing: bool = Field(
        True,
        description="Pack several sequences into one row per micro-batch (positions restart "
        "per sequence, attention stays within it); False pads one sequence per row.",
    )
    pack_multiple: int = Field(
        64, ge=1, description="A packed row is padded up to a multiple of this many tokens."
    )
    attention: Literal["auto", "varlen", "flex", "loop"] = Field(
        "auto",
        description="Attention over a packed row of unequal sequences: varlen (FlashAttention "
        "varlen kernel, CUDA), flex (flex_attention), loop (SDPA per sequence); auto = varlen "
        "on CUDA, loop elsewhere.",
    )
    attention_uniform: Literal["auto", "sdpa", "sdpa_cudnn", "sdpa_flash", "same"] = Field(
        "auto",
        description="Attention over a packed row of equally long sequences: one batched causal "
        "SDPA call (auto = sdpa: torch picks the kernel), or `same` as `attention`.",
    )
    max_seq_len: int = Field(8192, ge=2, description="Longer sequences are handled by `overflow`.")
    overflow: Literal["truncate", "drop"] = Field(
        "truncate", description="truncate keeps the first max_seq_len tokens; drop skips it."
    )
    chunk_tokens: int = Field(
        1024, ge=1, description="Tokens per lm-head chunk (memory ~ chunk x vocab fp32)."
    )
    lm_head: Literal["auto", "eager", "compiled", "triton", "triton_keep"] = Field(
        "auto",
        description="The lm head's passes over each chunk's logits: eager torch, compiled "
        "(inductor), or triton (one Triton pass each way around cuBLAS matmuls; CUDA only); "
        "triton_keep: triton with a micro-batch's bf16 logits kept from forward to backward "
        "(no recompute; scored tokens x vocab x 2 bytes) whenever the device has room, else "
        "as triton; auto = triton_keep on CUDA where Triton imports (the fastest measured), "
        "elsewhere compiled when the model compiles, else eager.",
    )
    gc_full_every: int = Field(
        50,
        ge=0,
        description="Python's garbage collector is off while a step runs; after it the young "
        "generations are collected, everything alive after the first step is frozen, and every "
        "N steps there is a full collection (0: the collector is left as it is).",
    )


class LossConfig(Section):
    """Which policy loss and its coefficients (`[train.loss]` in a run config)."""

    type: str = Field(
        "grpo", description="Registered loss: grpo | dr_grpo | gspo | grpo_tis | gspo_tis."
    )
    clip_low: float = Field(0.2, ge=0, lt=1, description="Token ratio lower clip: 1 - clip_low.")
    clip_high: float = Field(0.28, ge=0, description="Token ratio upper clip (DAPO clip-higher).")
    gspo_clip_low: float = Field(3e-4, ge=0, lt=1, description="GSPO sequence-ratio lower clip.")
    gspo_clip_high: float = Field(4e-4, ge=0, description="GSPO sequence-ratio upper clip.")
    aggregation: Aggregation = Field(
        "token_mean",
        description="How grpo/grpo_tis reduce per-token losses (dr_grpo, gspo fix theirs).",
    )
    norm_constant: float = Field(
        4096.0,
        gt=0,
        description="constant_norm / Dr.GRPO: tokens per sequence (generation budget).",
    )
    kl_coef: float = Field(0.0, ge=0, description="KL penalty weight; 0 means no reference model.")
    kl_type: Literal["k1", "k2", "k3"] = Field(
        "k3", description="KL estimator (Schulman's k1/k2/k3)."
    )
    entropy_coef: float = Field(0.0, ge=0, description="Entropy bonus weight (subtracted).")
    tis_cap: float = Field(2.0, gt=0, description="TIS cap C on pi_train/pi_rollout.")
    tis_level: Literal["token", "sequence"] = Field(
        "token", description="TIS weight per token, or per sequence (geometric mean)."
    )
    log_ratio_clamp: float = Field(
        20.0, gt=0, description="Clamp |log ratio| before exp (overflow guard)."
    )

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in LOSSES:
            raise LOSSES.unknown(value)
        return value


class RLConfig(Section):
    """How one `RLTrainer.train_step` uses its batch."""

    ppo_epochs: int = Field(1, ge=1, description="Passes over the batch per train_step.")
    num_minibatches: int = Field(
        1, ge=1, description="Optimizer steps per epoch (the batch split by sequences)."
    )
    temperature: float = Field(
        1.0, gt=0, description="Sampling temperature of the rollouts (log-probs use it too)."
    )
    log_entropy: bool = Field(True, description="Compute entropy for metrics when not in the loss.")
    max_logprob_drop: float = Field(
        0.0,
        ge=0,
        description="Step guard (training.step_guard): after a step, no correct answer of the "
        "batch (a turn judged correct) may lose more than this many nats of summed log-prob; "
        "else the step is halved, or undone. 0 = off.",
    )
    guard_halvings: int = Field(3, ge=0, description="Step guard: halvings before undoing.")
    shuffle: bool = Field(True, description="Shuffle sequences between minibatches (seeded).")
    seed: int = 0


class CheckpointConfig(Section):
    """Training-state checkpoints (model, optimizer, scheduler, RNG, step, data position)."""

    dir: str = Field("checkpoints", description="Relative paths are under the run dir.")
    every_steps: int = Field(0, ge=0, description="Save every N optimizer steps; 0 = only at end.")
    keep_last: int = Field(2, ge=1, description="Checkpoints kept; older ones are deleted.")
    resume: bool = Field(True, description="Resume from the newest checkpoint in `dir` if any.")
    save_final: bool = True


class LoggingConfig(Section):
    """Where step metrics go: a fixed-format line, JSONL, TensorBoard, W&B."""

    every_steps: int = Field(1, ge=1, description="Print the step line every N steps.")
    jsonl: bool = Field(True, description="Append metrics to RUN_DIR/metrics.jsonl.")
    tensorboard: bool = Field(False, description="Write RUN_DIR/tb (needs the tensorboard extra).")
    wandb_project: str | None = Field(None, description="W&B project; None = off.")
    wandb_entity: str | None = None
    progress: bool = Field(True, description="Progress bar on long loops.")


class DistConfig(Section):
    """Data parallelism under torchrun (ignored when WORLD_SIZE is 1)."""

    backend: Literal["auto", "gloo", "nccl"] = Field(
        "auto", description="auto: nccl with CUDA, gloo on CPU."
    )
    fsdp: bool = Field(True, description="FSDP2 fully_shard per decoder layer + root.")
    reshard_after_forward: bool = Field(True, description="FSDP2: free gathered layers after fwd.")
    timeout_s: int = Field(1800, ge=10)


class TrainerConfig(Section):
    """The RL trainer (`[train]` in a run config)."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    batch: BatchConfig = Field(default_factory=BatchConfig)
    loss: LossConfig = Field(default_factory=LossConfig)
    rl: RLConfig = Field(default_factory=RLConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    dist: DistConfig = Field(default_factory=DistConfig)
    weights_dir: str = Field(
        "weights", description="save_weights() writes versioned HF dirs WEIGHTS_DIR/v{N}."
    )
    keep_weights: int = Field(2, ge=1, description="Versioned weight dirs kept on disk.")


def _repair_eval() -> EvalSettings:
    return EvalSettings(device="cpu", secret_seed=0)


class RepairDataConfig(Section):
    """Repair episodes for SFT: each solution broken by named mutations, every broken program
    judged by the real evaluator, then [prompt, broken program, its feedback, the solution]."""

    mutations: list[str] = Field(
        default_factory=list,
        description="names in jobs.repair_data.MUTATIONS, tried in this order; empty = none",
    )
    per_problem: int = Field(3, ge=1, description="episodes kept per problem (first that fail)")
    problems: list[str] = Field(
        default_factory=list, description="only these problems (ids or names); empty = every pair"
    )
    cache_dir: str | None = Field(
        None, description="verdicts cached here (JSONL keyed by problem, code and settings)"
    )
    workers: int = Field(2, ge=1, description="evaluations in flight")
    eval: EvalSettings = Field(
        default_factory=_repair_eval, description="how mutations are judged (fixed hidden seed)"
    )


class SFTDataConfig(Section):
    """What SFT trains on and how examples become token streams."""

    kind: Literal["builtin", "kernelbook", "chat"] = Field(
        "builtin",
        description="builtin: the built-in suite's solutions; kernelbook: pairs; "
        "chat: JSONL of {'messages': [...]}",
    )
    path: str | None = Field(None, description="Parquet or JSONL file (kernelbook, chat).")
    builtin_size: str = Field("cpu", description="builtin: size preset of the problems.")
    builtin_problems: list[str] = Field(
        default_factory=list,
        description="builtin: only these problems (names or ids); empty = all.",
    )
    pytorch_column: str = Field("python_code", description="kernelbook: PyTorch source column.")
    triton_column: str = Field("triton_code", description="kernelbook: Triton source column.")
    entry_point_column: str | None = Field(
        "entry_point", description="kernelbook: class name column; renamed to Model/ModelNew."
    )
    messages_column: str = Field("messages", description="chat: the list of messages.")
    extra_problems: list[ProblemsConfig] = Field(
        default_factory=list,
        description="builtin/kernelbook: also the (problem, solution) pairs of these problem sets "
        "(any suite, e.g. suite 'variants' category 'sft').",
    )
    repair: RepairDataConfig = Field(
        default_factory=RepairDataConfig,
        description="builtin/kernelbook: repair episodes from judged mutations of the pairs.",
    )
    thinking: Literal["none", "empty", "short"] = Field(
        "empty", description="Answer opens with no think block, an empty one, or `think_text`."
    )
    think_text: str = Field(
        "Write a Triton kernel that computes the same result, with masked loads and stores.",
        description="thinking='short': the reasoning put in the think block.",
    )
    min_tokens: int = Field(1, ge=1, description="Shorter tokenised examples are dropped.")
    max_tokens: int = Field(4096, ge=2, description="Longer tokenised examples are dropped.")
    dedup: bool = Field(True, description="Drop examples whose messages hash equal.")
    limit: int | None = Field(None, ge=1, description="Keep at most this many examples.")
    end_of_turn_token: str | None = Field(
        None, description="Token ending an assistant turn; None = the tokenizer's eos."
    )
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    feedback: FeedbackConfig = Field(default_factory=FeedbackConfig)


class SFTConfig(Section):
    """The SFT loop."""

    data: SFTDataConfig = Field(default_factory=SFTDataConfig)
    epochs: int = Field(1, ge=1)
    batch_size: int = Field(8, ge=1, description="Sequences per optimizer step (global).")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many steps.")
    shuffle: bool = True
    seed: int = 0


class SFTRunConfig(Section):
    """`tritonforge sft --config FILE`: everything an SFT run needs."""

    run_dir: str = Field("runs/sft", description="Outputs: config, metrics, checkpoints, model.")
    model: ModelConfig = Field(default_factory=ModelConfig)
    optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=1e-4))
    batch: BatchConfig = Field(default_factory=BatchConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    dist: DistConfig = Field(default_factory=DistConfig)
    output_dir: str = Field("final", description="Final HF model dir (relative to run_dir).")
    threads: int | None = Field(
        None,
        ge=1,
        description="torch intra-op threads (pinned: same numbers on machines of the "
        "same kind); None leaves torch's default",
    )
    deterministic: bool = Field(
        False, description="deterministic torch algorithms and seeded global RNGs (sft.seed)"
    )
