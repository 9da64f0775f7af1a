"""The trained model: loading a Hugging Face causal LM and computing per-token log-probs from it.

Covers: `load_causal_lm` (AutoModelForCausalLM from a path, dtype, attention backend, gradient
checkpointing, `use_cache=False`), `load_reference` (only when the loss needs one; never loaded
otherwise), and `PolicyModel`, an nn.Module whose forward runs the decoder body (`lm.model`) and
`chunked_token_logprobs` against the lm-head weight, so no [B, T, V] logits tensor is ever built.
PolicyModel is also the FSDP root (see training.distributed), which keeps the embeddings, final
norm and lm head in one group, gathered while the log-probs are computed.
Does not cover: batching (training.batching), losses, the optimizer, sharding itself.

Architectures: any HF causal LM whose output layer is a plain bias-free linear map of the
decoder's last hidden state (Qwen2/3, Qwen3-MoE, Llama, Mistral, ...). Models with logit
soft-capping or logit scaling would need those applied here (not done). Mixture-of-experts: the
router load-balancing loss is ignored (the policy-gradient loss alone trains the experts; the
router is trained through it as well), which is the usual choice for RL fine-tuning.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from tritonforge.config.train import LossConfig, ModelConfig
from tritonforge.logging_setup import get_logger
from tritonforge.training.logprobs import chunked_token_logprobs
from tritonforge.training.losses import needs_reference

__all__ = [
    "DTYPES",
    "PolicyModel",
    "compute_dtype",
    "enable_gradient_checkpointing",
    "load_causal_lm",
    "load_reference",
    "load_tokenizer",
    "param_dtype",
    "prepare_for_training",
]

log = get_logger(__name__)

Tensor = torch.Tensor
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _dtype_kwarg(dtype: torch.dtype) -> dict[str, Any]:
    """transformers >= 4.56 takes `dtype`, older ones `torch_dtype`."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def compute_dtype(cfg: ModelConfig) -> torch.dtype:
    return DTYPES[cfg.dtype]


def param_dtype(cfg: ModelConfig) -> torch.dtype:
    """fp32 master weights when `master_fp32`, else the compute dtype."""
    return torch.float32 if cfg.master_fp32 else DTYPES[cfg.dtype]


def enable_gradient_checkpointing(lm: nn.Module) -> None:
    """Non-reentrant activation checkpointing of each decoder layer (transformers 4.x and 5.x)."""
    kwargs = {"use_reentrant": False}
    if hasattr(lm, "activation_checkpointing_enable"):
        lm.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def prepare_for_training(lm: nn.Module, cfg: ModelConfig) -> nn.Module:
    """use_cache off, checkpointing per config, train mode (dropout as the model defines)."""
    lm.config.use_cache = False
    if cfg.gradient_checkpointing:
        enable_gradient_checkpointing(lm)
    return lm.train()


def load_causal_lm(cfg: ModelConfig, path: str | None = None) -> nn.Module:
    """AutoModelForCausalLM from `path` (default cfg.path) in `param_dtype(cfg)`, on CPU, train mode."""
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(
        path or cfg.path,
        attn_implementation=cfg.attn_implementation,
        trust_remote_code=cfg.trust_remote_code,
        **_dtype_kwarg(param_dtype(cfg)),
    )
    return prepare_for_training(lm, cfg)


def load_tokenizer(cfg: ModelConfig) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(
        cfg.tokenizer_path or cfg.path, trust_remote_code=cfg.trust_remote_code
    )


def freeze(lm: nn.Module) -> nn.Module:
    """Eval mode, no gradients (a reference model)."""
    for p in lm.parameters():
        p.requires_grad_(False)
    return lm.eval()


def load_reference(
    model_cfg: ModelConfig, loss_cfg: LossConfig, policy_lm: nn.Module | None = None
) -> nn.Module | None:
    """The frozen reference model when `needs_reference(loss_cfg)`, else None (nothing loaded).

    From `model_cfg.reference_path` when set; else a copy of `policy_lm` when given (the initial
    policy, for models built in code); else from `model_cfg.path`.
    """
    if not needs_reference(loss_cfg):
        return None
    if model_cfg.reference_path is None and policy_lm is not None:
        ref = copy.deepcopy(policy_lm)
    else:
        ref = load_causal_lm(model_cfg, model_cfg.reference_path or model_cfg.path)
    ref.config.use_cache = False
    log.info("reference model loaded", extra={"fields": {"kl_coef": loss_cfg.kl_coef}})
    return freeze(ref)


def _base_model(lm: nn.Module) -> nn.Module:
    base = getattr(lm, getattr(lm, "base_model_prefix", "model"), None)
    if base is None:
        raise ValueError(f"{type(lm).__name__} has no base model attribute (base_model_prefix)")
    return base


class PolicyModel(nn.Module):
    """`lm` plus a chunked log-prob head: forward returns (logp [B, T], entropy [B, T] | None).

    `targets[b, t]` is the token predicted at position t (the next input token), < 0 where not
    scored. Log-probs are of softmax(logits / temperature), as the inference engine sampled.
    Compute runs in `compute_dtype`: under autocast when the parameters are fp32 masters (one
    process), as they come when FSDP2 mixed precision already cast them; the lm-head weight is
    cast to it so the chunked head's matmuls (forward and backward) run in that dtype too.
    """

    def __init__(
        self, lm: nn.Module, chunk_tokens: int = 1024, compute_dtype: torch.dtype = torch.float32
    ) -> None:
        super().__init__()
        self.lm = lm
        self.chunk_tokens = chunk_tokens
        self.compute_dtype = compute_dtype
        head = lm.get_output_embeddings()
        if head is None or getattr(head, "bias", None) is not None:
            raise ValueError("PolicyModel needs a bias-free linear output layer")

    def forward(  # type: ignore[override]
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None,
        targets: Tensor,
        temperature: float = 1.0,
        compute_entropy: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        weight_vh = self.lm.get_output_embeddings().weight
        use_autocast = self.compute_dtype != torch.float32 and weight_vh.dtype == torch.float32
        with torch.autocast(input_ids.device.type, self.compute_dtype, enabled=use_autocast):
            out = _base_model(self.lm)(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False
            )
        hidden_bth = out.last_hidden_state
        logp_bt, ent_bt = chunked_token_logprobs(
            hidden_bth,
            weight_vh.to(self.compute_dtype),
            targets,
            self.chunk_tokens,
            temperature,
            compute_entropy,
        )
        # fresh tensors, not views: FSDP2 hooks its pre-backward unshard onto the outputs
        return logp_bt.clone(), ent_bt.clone() if ent_bt is not None else None
