"""Policies a run can make without network: the tiny model, its SFT, a Qwen3-0.6B-shaped model.

Covers: `OFFLINE_MODELS` (name -> builder: the names `offline_fallback` and the loop benchmark
take), `offline_model_dir(name)` (the model folder, under runs/offline-models/),
and `ensure_offline_model(name)` (built once; later calls reuse the folder).
- `tiny`: `make-tiny-model`'s model (random weights, the tiny byte-level BPE tokenizer).
- `tiny-sft`: the tiny model after the demo's SFT (config.demo.default_sft: the six elementwise
  built-in solutions, their `variants` sft spellings, judged repair episodes), trained on the
  device the trainer picks (a GPU where there is one). It writes kernels the judge accepts.
- `qwen3-0.6b-shape`: Qwen3-0.6B's shape (28 layers, hidden 1024, 16/8 heads, vocabulary 151,936,
  tied embeddings) with random bf16 weights and the tiny tokenizer, for cost figures: its
  generation, training step and memory are those of the real model's shape, but it writes
  nothing a judge accepts (ids past the tokenizer's vocabulary decode to nothing), so its
  episodes cost the judge only static checks.
Torch-free at import; each builder imports what it needs.
Does not cover: when a fallback applies (plan.runs.resolve_policy_fallback), real checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tritonforge.logging_setup import get_logger
from tritonforge.rollout.tiny_model import is_tiny_model_dir

__all__ = [
    "OFFLINE_MODELS",
    "OFFLINE_ROOT",
    "QWEN3_06B_SHAPE",
    "ensure_offline_model",
    "offline_model_dir",
]

log = get_logger(__name__)

OFFLINE_ROOT = Path("runs/offline-models")
# Qwen/Qwen3-0.6B's config.json, the shape only (no weights are downloaded)
QWEN3_06B_SHAPE = dict(
    vocab_size=151936, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
    num_key_value_heads=8, head_dim=128, intermediate_size=3072, max_position_embeddings=40960,
    rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True,
)  # fmt: skip


def offline_model_dir(name: str, root: Path = OFFLINE_ROOT) -> Path:
    """The folder of offline model `name` (tiny-sft: the SFT run's final model)."""
    return root / "tiny-sft" / "final" if name == "tiny-sft" else root / name


def _build_tiny(root: Path) -> Path:
    from tritonforge.rollout.tiny_model import make_tiny_model

    return make_tiny_model(offline_model_dir("tiny", root))


def _build_tiny_sft(root: Path) -> Path:
    """The demo's SFT of the tiny model; torch's deterministic setting is restored after it."""
    import torch

    from tritonforge.config.demo import default_sft
    from tritonforge.training.sft import run_sft

    tiny = ensure_offline_model("tiny", root)
    cfg = default_sft()
    cfg.run_dir = str(root / "tiny-sft")
    cfg.model.path = str(tiny)
    cfg.sft.data.repair.cache_dir = str(root / "tiny-sft" / "repair_cache")
    cfg.logging.progress = False
    cfg.model.compile = "off"  # as the demo's SFT on a CPU (and no compile time on a GPU)
    before = torch.are_deterministic_algorithms_enabled()
    try:
        result = run_sft(cfg)
    finally:
        torch.use_deterministic_algorithms(before)
    return Path(result.model_dir)


def _build_qwen3_shape(root: Path) -> Path:
    """Random weights of QWEN3_06B_SHAPE in bf16 (made on a GPU where there is one: seconds)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from tritonforge.rollout.tiny_model import ENDOFTEXT, IM_END, save_model_dir, tiny_tokenizer

    fast, ids, _ = tiny_tokenizer(4096)
    config = Qwen3Config(
        **QWEN3_06B_SHAPE,
        bos_token_id=ids[ENDOFTEXT],
        eos_token_id=ids[IM_END],
        pad_token_id=ids[ENDOFTEXT],
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.random.fork_rng(devices=[0] if device == "cuda" else []), torch.device(device):
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(config).to(torch.bfloat16).eval()
    gen = model.generation_config
    gen.eos_token_id, gen.pad_token_id = [ids[IM_END], ids[ENDOFTEXT]], ids[ENDOFTEXT]
    meta = {"shape": "Qwen3-0.6B", "weights": "random (seed 0)", "token_ids": ids}
    out = save_model_dir(offline_model_dir("qwen3-0.6b-shape", root), model, fast, meta)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


OFFLINE_MODELS: dict[str, Callable[[Path], Path]] = {
    "tiny": _build_tiny,
    "tiny-sft": _build_tiny_sft,
    "qwen3-0.6b-shape": _build_qwen3_shape,
}


def ensure_offline_model(name: str, root: Path = OFFLINE_ROOT) -> Path:
    """The folder of offline model `name`, built there first when it is not complete."""
    if name not in OFFLINE_MODELS:
        raise KeyError(f"unknown offline model {name!r}; known: {sorted(OFFLINE_MODELS)}")
    path = offline_model_dir(name, root)
    if not is_tiny_model_dir(path):  # (any complete model folder)
        log.info("building offline model %s in %s", name, path)
        OFFLINE_MODELS[name](root)
    return path
