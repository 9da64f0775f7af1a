"""The tiny model: a byte-level BPE tokenizer and a random-init Qwen3 model, built in seconds on CPU.

Covers: training the tokenizer on a built-in corpus (the built-in problems' sources, this package's
own Python files and a short fixed text on Python/PyTorch/Triton), the special tokens and the
Qwen-style ChatML chat template, a small `Qwen3ForCausalLM` (or `Qwen3MoeForCausalLM`) with random
weights, saving both in Hugging Face format, and `ensure_tiny_model` for tests and demos.
Does not cover: training the model (it is random; it exists so that every path from tokens to
trainer runs on a laptop) or the command-line wrapper (see `tritonforge.commands.make_tiny_model`).

Determinism: the corpus files are read in sorted order and the weights come from a private torch
generator seeded with `seed`, so the same code and arguments give the same tokenizer and weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from tritonforge.config import Section
from tritonforge.logging_setup import get_logger

log = get_logger(__name__)

DEFAULT_TINY_MODEL_DIR = Path("runs/tiny-model")

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
# Control tokens: special (skipped when decoding with skip_special_tokens=True).
CONTROL_TOKENS = [ENDOFTEXT, IM_START, IM_END]
# Reasoning markers: added tokens but not special (as in Qwen3), so decoded text keeps them.
REASONING_TOKENS = [THINK_OPEN, THINK_CLOSE]

# Qwen-style ChatML. `add_generation_prompt` opens an assistant turn; `enable_thinking=false`
# pre-fills an empty think block as Qwen3's template does.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

# A little fixed text so the vocabulary covers chat and kernel words even with an empty package.
_SEED_TEXT = """<|im_start|>system
You are an expert in writing fast, correct Triton GPU kernels.<|im_end|>
<|im_start|>user
Write a Triton implementation ModelNew of this PyTorch program.
```python
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
```<|im_end|>
<|im_start|>assistant
<think>
Each program handles BLOCK_SIZE elements; mask the tail; load, compute, store.
</think>
```python
import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
        relu_kernel[grid](x, out, n, BLOCK_SIZE=1024)
        return out
```<|im_end|>
"""

_MAX_CORPUS_BYTES = 4_000_000


class TinyModelSpec(Section):
    """Shape of the tiny model and its tokenizer."""

    vocab_size: int = Field(4096, ge=512, description="Tokenizer size including special tokens.")
    hidden: int = Field(128, ge=16, description="Hidden size.")
    layers: int = Field(2, ge=1, description="Decoder layers.")
    heads: int = Field(4, ge=1, description="Attention heads.")
    kv_heads: int = Field(2, ge=1, description="Key/value heads (grouped-query attention).")
    seed: int = Field(0, description="Seed of the weight initialisation.")
    moe: bool = Field(False, description="Qwen3-MoE instead of dense Qwen3.")
    experts: int = Field(4, ge=2, description="MoE: experts per layer.")
    experts_per_token: int = Field(2, ge=1, description="MoE: experts routed per token.")
    max_position_embeddings: int = Field(8192, ge=512, description="Context length.")
    lm_head_std: float = Field(
        0.25,
        gt=0,
        description="Std of the (untied) output-layer init; larger than the usual 0.02 so the "
        "random model's next-token distribution has a few nats of entropy instead of being uniform "
        "(logit std ~ sqrt(hidden) * std), which makes logprob and weight-update checks meaningful.",
    )


def _package_root() -> Path:
    return Path(__file__).resolve().parents[1]


def corpus_files() -> list[Path]:
    """Built-in problem sources and the prompt templates, sorted.

    Only data files, not the package's code: the tokenizer (and so every tiny-model result)
    must not change when unrelated code changes."""
    root = _package_root()
    builtin = sorted((root / "problems" / "builtin").rglob("*.py"))
    prompts = sorted((root / "rollout" / "prompts").glob("*.txt"))
    return builtin + prompts


def build_corpus() -> list[str]:
    """The training texts: the fixed seed text plus corpus files, capped at a few MB."""
    texts = [_SEED_TEXT]
    total = len(_SEED_TEXT)
    for path in corpus_files():
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if total + len(text) > _MAX_CORPUS_BYTES:
            break
        texts.append(text)
        total += len(text)
    return texts


def train_tokenizer(vocab_size: int, texts: list[str]):
    """A byte-level BPE `tokenizers.Tokenizer` with the control and reasoning tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(REASONING_TOKENS),
        min_frequency=1,
        special_tokens=list(CONTROL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in REASONING_TOKENS])
    return tok


def wrap_tokenizer(tok):
    """Wrap as `PreTrainedTokenizerFast` with ChatML template, eos=<|im_end|>, pad=<|endoftext|>."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        unk_token=None,
        bos_token=None,
        model_max_length=1_000_000,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _model_config(spec: TinyModelSpec, vocab_size: int, ids: dict[str, int]):
    common = dict(
        vocab_size=vocab_size,
        hidden_size=spec.hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=ids[ENDOFTEXT],
        eos_token_id=ids[IM_END],
        pad_token_id=ids[ENDOFTEXT],
    )
    if spec.moe:
        from transformers import Qwen3MoeConfig

        return Qwen3MoeConfig(
            intermediate_size=spec.hidden * 3,
            moe_intermediate_size=spec.hidden * 2,
            num_experts=spec.experts,
            num_experts_per_tok=spec.experts_per_token,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            **common,
        )
    from transformers import Qwen3Config

    return Qwen3Config(
        intermediate_size=spec.hidden * 3, head_dim=spec.hidden // spec.heads, **common
    )


def build_model(spec: TinyModelSpec, vocab_size: int, ids: dict[str, int]):
    """Random-init model, float32, deterministic in `spec.seed` (global RNG left untouched)."""
    import torch
    from transformers import Qwen3ForCausalLM, Qwen3MoeForCausalLM

    if spec.hidden % spec.heads or spec.heads % spec.kv_heads:
        raise ValueError("hidden must divide by heads and heads by kv_heads")
    config = _model_config(spec, vocab_size, ids)
    cls = Qwen3MoeForCausalLM if spec.moe else Qwen3ForCausalLM
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = cls(config)
        head = model.get_output_embeddings().weight  # [vocab, hidden]
        with torch.no_grad():
            head.normal_(0.0, spec.lm_head_std)
    model = model.to(torch.float32).eval()
    gen = model.generation_config
    gen.eos_token_id = [ids[IM_END], ids[ENDOFTEXT]]
    gen.pad_token_id = ids[ENDOFTEXT]
    gen.bos_token_id = ids[ENDOFTEXT]
    return model


def _portable_tokenizer_config(path: Path) -> None:
    """Name the class `PreTrainedTokenizerFast` (transformers 5 writes `TokenizersBackend`, which
    4.x cannot load) and inline the chat template for readers that ignore chat_template.jinja."""
    cfg = json.loads(path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg["chat_template"] = CHAT_TEMPLATE
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def tiny_tokenizer(vocab_size: int) -> tuple[Any, dict[str, int], list[str]]:
    """The tiny tokenizer (wrapped), the ids of its control and reasoning tokens, its corpus."""
    texts = build_corpus()
    fast = wrap_tokenizer(train_tokenizer(vocab_size, texts))
    ids = {t: fast.convert_tokens_to_ids(t) for t in CONTROL_TOKENS + REASONING_TOKENS}
    return fast, ids, texts


def save_model_dir(out: Path, model: Any, tokenizer: Any, meta: dict[str, Any]) -> Path:
    """Save `model` and `tokenizer` (Hugging Face format) and `meta` (tiny_model.json) to
    `out`: written to a temporary folder beside it, then renamed over it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        _portable_tokenizer_config(tmp / "tokenizer_config.json")
        (tmp / "tiny_model.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def make_tiny_model(
    out: str | Path = DEFAULT_TINY_MODEL_DIR, spec: TinyModelSpec | None = None
) -> Path:
    """Build tokenizer and model and save them to `out` (written to a temp dir, then renamed)."""
    spec = spec or TinyModelSpec()
    out = Path(out)
    t0 = time.perf_counter()
    fast, ids, texts = tiny_tokenizer(spec.vocab_size)
    model = build_model(spec, len(fast), ids)
    corpus_hash = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    meta = {"spec": spec.model_dump(), "corpus_sha256_16": corpus_hash, "vocab": len(fast)}
    meta["token_ids"] = ids
    save_model_dir(out, model, fast, meta)
    params = sum(p.numel() for p in model.parameters())
    log.info(
        "tiny model saved",
        extra={
            "fields": {
                "out": str(out),
                "vocab": len(fast),
                "params": params,
                "seconds": round(time.perf_counter() - t0, 2),
            }
        },
    )
    return out


def is_tiny_model_dir(path: str | Path) -> bool:
    """The directory holds a complete saved model (config, weights, tokenizer)."""
    p = Path(path)
    return (
        (p / "config.json").is_file()
        and (p / "tokenizer.json").is_file()
        and any(p.glob("*.safetensors"))
    )


def ensure_tiny_model(
    path: str | Path = DEFAULT_TINY_MODEL_DIR, spec: TinyModelSpec | None = None
) -> Path:
    """Return `path`, building the tiny model there first if it is missing or incomplete."""
    p = Path(path)
    if not is_tiny_model_dir(p):
        make_tiny_model(p, spec)
    return p
