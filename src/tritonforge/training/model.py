"""The trained model: loading a Hugging Face causal LM and computing per-token log-probs from it.

Covers: `load_causal_lm` (AutoModelForCausalLM from a path, dtype, attention backend,
`use_cache=False`), `load_reference` (only when the loss needs one; never loaded otherwise),
`accelerate_layers` (torch.compile of each decoder layer's forward, one compiled graph shared by
all layers, and non-reentrant activation checkpointing of a chosen subset of layers, inside the
compiled region), and `PolicyModel`, an nn.Module whose forward runs the decoder body
(`lm.model`) on a micro-batch (padded rows, or one packed row with varlen attention: see
training.attention) and the chunked log-probs of its scored positions against the lm-head
weight, so no [B, T, V] logits tensor is ever built. PolicyModel is also the FSDP root (see
training.distributed), which keeps the embeddings, final norm and lm head in one group,
gathered while the log-probs are computed.
Does not cover: batching (training.batching, training.packing), losses, the optimizer, sharding.

Architectures: any HF causal LM whose output layer is a plain bias-free linear map of the
decoder's last hidden state (Qwen2/3, Qwen3-MoE, Llama, Mistral, ...). Models with logit
soft-capping or logit scaling would need those applied here (not done). Mixture-of-experts: the
router load-balancing loss is ignored (the policy-gradient loss alone trains the experts; the
router is trained through it as well), which is the usual choice for RL fine-tuning.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from tritonforge.config.train import LossConfig, ModelConfig
from tritonforge.logging_setup import get_logger
from tritonforge.training import attention
from tritonforge.training.batching import MicroBatch, Scoring
from tritonforge.training.distributed import decoder_layers
from tritonforge.training.logprobs import EAGER, ChunkOps, scored_logprobs
from tritonforge.training.losses import needs_reference

__all__ = [
    "DTYPES",
    "PolicyModel",
    "accelerate_layers",
    "checkpoint_indices",
    "compute_dtype",
    "enable_gradient_checkpointing",
    "load_causal_lm",
    "load_reference",
    "load_tokenizer",
    "masters_in_optimizer",
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


def masters_in_optimizer(cfg: ModelConfig, sharded: bool = False) -> bool:
    """Whether the fp32 masters of a bf16 model live in the optimizer (training.master_adamw)
    rather than in fp32 parameters; never under FSDP (`sharded`)."""
    wanted = cfg.master_weights == "optimizer" or (cfg.master_weights == "auto" and not sharded)
    return cfg.dtype != "fp32" and cfg.master_fp32 and wanted and not sharded


def param_dtype(cfg: ModelConfig, sharded: bool = False) -> torch.dtype:
    """fp32 when the masters are the parameters, else the compute dtype (pure bf16, or bf16
    parameters whose masters the optimizer keeps)."""
    fp32 = cfg.master_fp32 and not masters_in_optimizer(cfg, sharded)
    return torch.float32 if fp32 else DTYPES[cfg.dtype]


def enable_gradient_checkpointing(lm: nn.Module) -> None:
    """Non-reentrant activation checkpointing of each decoder layer (transformers 4.x and 5.x)."""
    kwargs = {"use_reentrant": False}
    if hasattr(lm, "activation_checkpointing_enable"):
        lm.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def prepare_for_training(lm: nn.Module, cfg: ModelConfig) -> nn.Module:
    """use_cache off, train mode (dropout as the model defines). Activation checkpointing is
    applied per layer by `accelerate_layers` (the trainer's), not by transformers."""
    lm.config.use_cache = False
    return lm.train()


def checkpoint_indices(n_layers: int, count: int | None) -> list[int]:
    """`count` layer indices spread evenly over `n_layers` (None or >= n_layers: all)."""
    if count is None or count >= n_layers:
        return list(range(n_layers))
    if count <= 0:
        return []
    return sorted({round(i * n_layers / count) for i in range(count)})


def accelerate_layers(
    lm: nn.Module,
    compile_layers: bool,
    checkpointed: Sequence[int] = (),
    backend: str = "inductor",
) -> int:
    """Replace each decoder layer's `forward` (an instance attribute: module structure, state
    dict and hooks are unchanged, FSDP2's hooks stay outside) by the original wrapped in
    non-reentrant activation checkpointing (layers in `checkpointed`), then torch.compile.
    All layers share one code object, so dynamo compiles one graph per variant, not per layer.
    Returns the number of layers changed."""
    chosen = set(checkpointed)
    layers = decoder_layers(lm)
    for i, layer in enumerate(layers):
        fwd = _layer_forward(layer.forward, i in chosen)
        if compile_layers:
            fwd = _nested_breaks(torch.compile(fwd, backend=backend))
        layer.forward = fwd
    if compile_layers:
        _raise_recompile_limit(len(layers))
    return len(layers)


def _nested_breaks(compiled: Any) -> Any:
    """`compiled` traced with dynamo's nested graph breaks (torch >= 2.10): at the packed
    attention's graph break (training/attention.py: it runs eagerly) dynamo resumes in the
    nested frame instead of breaking at the layer's call of the attention module, so the tensors
    the eager kernel takes are made inside the layer's graph, in the layout whose gradients
    AOTAutograd takes without a copy (H200, 0.6B shape: 84 gradient copies fewer per step, 10 ms
    less device time). Without the setting (older torch) it is `compiled` as it was."""
    if not hasattr(torch._dynamo.config, "nested_graph_breaks"):
        return compiled

    @functools.wraps(compiled)
    def run(*args: Any, **kwargs: Any) -> Any:
        with torch._dynamo.config.patch(nested_graph_breaks=True):
            return compiled(*args, **kwargs)

    return run


def _layer_forward(original: Any, recompute: bool) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        if recompute and torch.is_grad_enabled():
            return checkpoint(original, *args, use_reentrant=False, **kwargs)
        return original(*args, **kwargs)

    return run


def _raise_recompile_limit(layers: int) -> None:
    """Variants (checkpointed or not, packed or padded, grad or no grad) x shapes may exceed
    dynamo's default of 8 compiled entries per code object; past it layers would run eagerly."""
    import torch._dynamo.config as dcfg

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dcfg, name):
            setattr(dcfg, name, max(getattr(dcfg, name), 64))


def load_causal_lm(
    cfg: ModelConfig, path: str | None = None, dtype: torch.dtype | None = None
) -> nn.Module:
    """AutoModelForCausalLM from `path` (default cfg.path) in `dtype` (default
    `param_dtype(cfg)`), on CPU, train mode."""
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(
        path or cfg.path,
        attn_implementation=cfg.attn_implementation,
        trust_remote_code=cfg.trust_remote_code,
        **_dtype_kwarg(dtype or param_dtype(cfg)),
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
    """`lm` plus a chunked log-prob head: forward(batch) returns (logp [B, L], entropy [B, L] |
    None) in the padded layout of `batch` (training.batching.MicroBatch).

    `targets[b, t]` is the token predicted at position t (the next input token), < 0 where not
    scored. Log-probs are of softmax(logits / temperature), as the inference engine sampled.
    Compute runs in `compute_dtype`: under autocast when the parameters are fp32 masters (one
    process), as they come when FSDP2 mixed precision already cast them; the lm-head weight is
    cast to it so the chunked head's matmuls (forward and backward) run in that dtype too.
    A batch with `packed` inputs runs as one packed row (`packing` must be on: it installs the
    packing-aware attention, training.attention); `attn_ragged` / `attn_uniform` choose its
    attention for rows of unequal / equal sequences. `head_ops` are the lm head's chunk
    functions (eager, or training.logprobs.compiled_ops).
    """

    def __init__(
        self,
        lm: nn.Module,
        chunk_tokens: int = 1024,
        compute_dtype: torch.dtype = torch.float32,
        packing: bool = False,
        attn_ragged: str = "auto",
        attn_uniform: str = "auto",
        head_ops: ChunkOps = EAGER,
    ) -> None:
        super().__init__()
        self.lm = lm
        self.chunk_tokens = chunk_tokens
        self.compute_dtype = compute_dtype
        self.attn_ragged, self.attn_uniform = attn_ragged, attn_uniform
        self.head_ops = head_ops
        head = lm.get_output_embeddings()
        if head is None or getattr(head, "bias", None) is not None:
            raise ValueError("PolicyModel needs a bias-free linear output layer")
        self.packing = packing and attention.supports_packing(lm)
        self._dict_masks = _takes_mask_dict(lm)
        if self.packing:
            attention.install(lm)

    def forward(  # type: ignore[override]
        self, batch: MicroBatch, temperature: float = 1.0, compute_entropy: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        weight_vh = self.lm.get_output_embeddings().weight
        use_autocast = self.compute_dtype != torch.float32 and weight_vh.dtype == torch.float32
        device = batch.input_ids.device
        with (
            torch.autocast(device.type, self.compute_dtype, enabled=use_autocast),
            self._inputs(batch) as inputs,
        ):
            hidden = _base_model(self.lm)(**inputs, use_cache=False).last_hidden_state
        scoring = batch.scoring if batch.scoring is not None else Scoring.of_padded(batch.targets)
        b, length = batch.shape
        logp, ent = scored_logprobs(
            hidden.reshape(-1, hidden.shape[-1]), weight_vh.to(self.compute_dtype),
            scoring.src, scoring.targets, scoring.dst, b * length,
            self.chunk_tokens, temperature, compute_entropy, self.head_ops,
        )  # fmt: skip
        return logp.view(b, length), ent.view(b, length) if ent is not None else None

    @contextlib.contextmanager
    def _inputs(self, batch: MicroBatch) -> Iterator[dict[str, Any]]:
        """Model kwargs: padded rows (the mask dropped when nothing is padded, so attention
        takes the plain causal kernels), or the packed row with its attention kwargs."""
        packed = batch.packed
        if packed is None:
            padded = batch.real_tokens != batch.input_ids.numel()
            yield {
                "input_ids": batch.input_ids,
                "attention_mask": batch.attention_mask if padded else None,
            }
            return
        if not self.packing:
            raise ValueError("a packed micro-batch needs PolicyModel(packing=True)")
        device = packed.input_ids.device
        backend = attention.resolve(
            self.attn_ragged, self.attn_uniform, packed.uniform_len, device, self.compute_dtype
        )
        kwargs = attention.packing_kwargs(packed, backend)
        masks = self._dict_masks
        with attention.packed_masks():
            yield {
                "input_ids": packed.input_ids, "position_ids": packed.position_ids,
                "attention_mask": dict(masks) if masks is not None else None, **kwargs,
            }  # fmt: skip


def _takes_mask_dict(lm: nn.Module) -> dict[str, None] | None:
    """{layer type: None} when the base model accepts prepared masks as a dict (most models of
    transformers 5: mask creation is then skipped), else None."""
    try:
        source = inspect.getsource(type(_base_model(lm)).forward)
    except (OSError, TypeError):
        return None
    if "attention_mask, dict)" not in source:
        return None
    types = getattr(lm.config, "layer_types", None) or ["full_attention"]
    return {t: None for t in set(types)}
