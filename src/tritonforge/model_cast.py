"""Casting a Hugging Face model to a dtype without rounding its rotary frequencies.

Covers: `cast_model` (parameters and buffers to a dtype, like `Module.to`, except the rotary
embeddings' inverse frequencies, which stay fp32; frequencies a previous `Module.to` already
rounded are recomputed from the rotary module's config, with a warning), `restore_rotary`
(that recomputation alone) and `rounded_rotary` (names of rotary frequency buffers held in a
half type). Used by the trainer (models passed in code), its KL reference model, the HF rollout
engine and the trainer benchmark, so all of them compute the positions `from_pretrained` does.
Does not cover: loading (`from_pretrained(dtype=...)` already keeps these buffers in fp32) or
rotary tables held as parameters or persistent buffers.

Why: `Module.to(torch.bfloat16)` casts every floating buffer, including `inv_freq` (and
`original_inv_freq`), which transformers' rotary embeddings compute in fp32 at init and read
as `inv_freq.float()`. A bf16 frequency is off by up to 2^-9 relative, so the angle of position
p is off by up to p * f * 2^-9: radians at p = 8192 for Qwen3's high frequencies (rope theta
1e6, head dim 128). Attention scores then differ from the fp32-frequency model (the sampler's,
from_pretrained's) more the longer the sequence; the mean loss hardly moves.
"""

from __future__ import annotations

import torch
from torch import nn

from tritonforge.logging_setup import get_logger

__all__ = ["ROTARY_BUFFERS", "cast_model", "restore_rotary", "rounded_rotary"]

ROTARY_BUFFERS = ("inv_freq", "original_inv_freq")
_HALF = (torch.float16, torch.bfloat16)
log = get_logger(__name__)


def _rotary_buffers(model: nn.Module) -> list[tuple[nn.Module, str, str]]:
    """(module, buffer name, qualified name) of every rotary frequency buffer."""
    return [
        (mod, name, f"{prefix}.{name}" if prefix else name)
        for prefix, mod in model.named_modules()
        for name, buf in mod._buffers.items()
        if name in ROTARY_BUFFERS and buf is not None and buf.is_floating_point()
    ]


def rounded_rotary(model: nn.Module) -> list[str]:
    """Qualified names of rotary frequency buffers held in fp16/bf16 (a model cast by
    `Module.to`: its positions differ from the fp32-frequency model's)."""
    return [qual for mod, name, qual in _rotary_buffers(model) if mod._buffers[name].dtype in _HALF]


def _fresh_buffers(mod: nn.Module) -> dict[str, torch.Tensor] | None:
    """The fp32 frequency buffers a new rotary module of the same type and config holds (as
    at `from_pretrained`), on CPU; None when the module cannot be rebuilt from `mod.config`."""
    config = getattr(mod, "config", None)
    if config is None:
        return None
    try:
        with torch.device("cpu"):
            fresh = type(mod)(config=config)
    except Exception:  # an unknown rotary class: report it, do not guess its frequencies
        return None
    bufs = {n: b for n, b in fresh._buffers.items() if n in ROTARY_BUFFERS and b is not None}
    return bufs if all(b.dtype == torch.float32 for b in bufs.values()) else None


def restore_rotary(model: nn.Module) -> tuple[list[str], list[str]]:
    """Recompute, in fp32 from their module's config, the rotary frequencies held in a half
    type, in place (each on its buffer's device). Returns (restored, left): qualified names of
    the buffers recomputed and of those that could not be (still rounded)."""
    restored, left = [], []
    for mod, name, qual in _rotary_buffers(model):
        buf = mod._buffers[name]
        if buf.dtype not in _HALF:
            continue
        fresh = _fresh_buffers(mod)
        if fresh is None or name not in fresh or fresh[name].shape != buf.shape:
            left.append(qual)
            continue
        mod._buffers[name] = fresh[name].to(buf.device)
        restored.append(qual)
    return restored, left


def cast_model(
    model: nn.Module, dtype: torch.dtype, device: torch.device | str | None = None
) -> nn.Module:
    """`model.to(device, dtype)` in place, its rotary frequency buffers in fp32 (moved to
    `device`); returns `model`. fp32 frequencies are kept bit for bit; ones a previous
    `Module.to` rounded are recomputed from the config (a warning says so: the model's
    positions were not the loaded model's), or left rounded with a warning if that fails."""
    restored, left = restore_rotary(model)
    if restored or left:
        log.warning(
            "rotary frequencies were rounded to a half type (Module.to casts them): "
            "recomputed in fp32 from the config where possible",
            extra={"fields": {"recomputed": restored, "still_rounded": left}},
        )
    kept = [(mod, name, mod._buffers[name]) for mod, name, _ in _rotary_buffers(model)]
    model.to(device=device, dtype=dtype)
    for mod, name, buf in kept:
        mod._buffers[name] = buf.to(device=mod._buffers[name].device)
    return model
