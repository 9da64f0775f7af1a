"""KernelBench level 4 offline: Hugging Face models built from their configs, without weights.

Level 4 problems read `config = AutoConfig.from_pretrained(model_name)` at import and build
`AutoModelForCausalLM.from_pretrained(model_name, config=config)`: both need the Hub (and the
second downloads weights). The judge only needs the architecture (inputs and weights are drawn
from hidden seeds anyway), so `offline_source` rewrites those two calls: the config is built by
`AutoConfig.for_model(**CONFIGS[model_name])` from the architecture fields of the model's
published `config.json`, and the model by `from_config(config)` (random weights, same shapes).
Everything else of the source stays byte-identical.

Covers: the config table (every model KernelBench level 4 uses), the rewrite, and the reason a
level-4 source cannot be made offline (an unknown model, an unknown template).
Does not cover: whether the model fits this machine (judge/problem_check.py) or running it.
The values are the architecture fields of the published configs (hidden sizes, layers, heads,
vocabulary, positions, attention layout); dropout, token ids and generation settings that do not
change shapes are left at transformers' defaults unless a model needs them to build.
"""

from __future__ import annotations

import re
from typing import Any

CONFIGS: dict[str, dict[str, Any]] = {
    "gpt2": {
        "model_type": "gpt2",
        "vocab_size": 50257,
        "n_positions": 1024,
        "n_embd": 768,
        "n_layer": 12,
        "n_head": 12,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
    },
    "facebook/opt-1.3b": {
        "model_type": "opt",
        "vocab_size": 50272,
        "hidden_size": 2048,
        "ffn_dim": 8192,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "max_position_embeddings": 2048,
        "word_embed_proj_dim": 2048,
        "do_layer_norm_before": True,
        "activation_function": "relu",
        "pad_token_id": 1,
        "bos_token_id": 2,
        "eos_token_id": 2,
    },
    "EleutherAI/gpt-neo-2.7B": {
        "model_type": "gpt_neo",
        "vocab_size": 50257,
        "hidden_size": 2560,
        "num_layers": 32,
        "num_heads": 20,
        "attention_types": [[["global", "local"], 16]],
        "window_size": 256,
        "max_position_embeddings": 2048,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
    },
    "google/bigbird-roberta-base": {
        "model_type": "big_bird",
        "vocab_size": 50358,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "max_position_embeddings": 4096,
        "hidden_act": "gelu_new",
        "attention_type": "block_sparse",
        "block_size": 64,
        "num_random_blocks": 3,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "sep_token_id": 66,
    },
    "google/electra-small-discriminator": {
        "model_type": "electra",
        "vocab_size": 30522,
        "embedding_size": 128,
        "hidden_size": 256,
        "num_hidden_layers": 12,
        "num_attention_heads": 4,
        "intermediate_size": 1024,
        "max_position_embeddings": 512,
        "hidden_act": "gelu",
    },
    "google/reformer-enwik8": {
        "model_type": "reformer",
        "vocab_size": 258,
        "hidden_size": 1024,
        "num_attention_heads": 8,
        "attention_head_size": 128,
        "feed_forward_size": 4096,
        "attn_layers": ["local", "local", "lsh", "local", "local", "local"] * 2,
        "axial_pos_shape": [128, 512],
        "axial_pos_embds_dim": [256, 768],
        "local_attn_chunk_length": 128,
        "lsh_attn_chunk_length": 256,
        "num_buckets": 512,
        "num_hashes": 4,
        "max_position_embeddings": 65536,
        "hidden_act": "relu",
        "is_decoder": True,
        "pad_token_id": 0,
    },
    "facebook/bart-large": {
        "model_type": "bart",
        "vocab_size": 50265,
        "d_model": 1024,
        "encoder_layers": 12,
        "decoder_layers": 12,
        "encoder_attention_heads": 16,
        "decoder_attention_heads": 16,
        "encoder_ffn_dim": 4096,
        "decoder_ffn_dim": 4096,
        "max_position_embeddings": 1024,
        "activation_function": "gelu",
        "pad_token_id": 1,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "decoder_start_token_id": 2,
    },
}

_CONFIG_CALL = re.compile(r"AutoConfig\.from_pretrained\(\s*(\w+)\s*\)")
_MODEL_CALL = re.compile(
    r"(AutoModel\w*)\.from_pretrained\(\s*[\w.]+\s*,\s*config\s*=\s*([\w.]+)\s*\)"
)
_NAME = re.compile(r"^(\w+)\s*=\s*[\"']([^\"']+)[\"']\s*$", re.MULTILINE)


def uses_hub(src: str) -> bool:
    """Whether a source loads anything from the Hugging Face Hub."""
    return "from_pretrained(" in src


def offline_source(src: str) -> tuple[str, str | None]:
    """(the source with Hub loads replaced by offline builds, None) or (src, why it cannot be)."""
    configs = _CONFIG_CALL.findall(src)
    if not configs:
        return (
            src,
            "loads from the Hugging Face Hub in a form other than AutoConfig.from_pretrained(NAME)",
        )
    names = dict(_NAME.findall(src))
    out = src
    for var in set(configs):
        model = names.get(var)
        if model is None:
            return src, f"AutoConfig.from_pretrained({var}): {var} is not a string constant"
        if model not in CONFIGS:
            return (
                src,
                f"no offline config for Hugging Face model {model!r} (known: {sorted(CONFIGS)})",
            )
        literal = repr(CONFIGS[model])
        out = re.sub(
            rf"AutoConfig\.from_pretrained\(\s*{var}\s*\)",
            f"AutoConfig.for_model(**{literal})",
            out,
        )
    # from_pretrained returns the model in eval mode (no dropout): from_config does not
    out = _MODEL_CALL.sub(lambda m: f"{m.group(1)}.from_config({m.group(2)}).eval()", out)
    if uses_hub(out):
        return (
            src,
            "loads weights or configs from the Hugging Face Hub in a form not rewritten here",
        )
    return out, None
