"""`tritonforge make-tiny-model`: build the tiny tokenizer + random Qwen3 model for CPU runs and tests.

Covers: argument parsing and calling `tritonforge.rollout.tiny_model.make_tiny_model`. Does not
cover: how the tokenizer and model are built (see that module).
"""

from __future__ import annotations

import argparse
import time

from pydantic import ValidationError

from tritonforge.config import ConfigError, describe_errors
from tritonforge.logging_setup import get_logger
from tritonforge.rollout.tiny_model import DEFAULT_TINY_MODEL_DIR, TinyModelSpec, make_tiny_model

log = get_logger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "make-tiny-model",
        help="train a BPE tokenizer and save a small random-init Qwen3 model (HF format)",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("--out", default=str(DEFAULT_TINY_MODEL_DIR), help="output directory (replaced)")
    p.add_argument(
        "--vocab-size", type=int, default=4096, help="tokenizer size incl. special tokens"
    )
    p.add_argument("--hidden", type=int, default=128, help="hidden size")
    p.add_argument("--layers", type=int, default=2, help="decoder layers")
    p.add_argument("--heads", type=int, default=4, help="attention heads")
    p.add_argument("--kv-heads", type=int, default=2, help="key/value heads")
    p.add_argument("--seed", type=int, default=0, help="weight-initialisation seed")
    p.add_argument(
        "--moe", action="store_true", help="Qwen3-MoE (4 experts, top-2) instead of dense"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    fields = ("vocab_size", "hidden", "layers", "heads", "kv_heads", "seed", "moe")
    try:
        spec = TinyModelSpec(**{f: getattr(args, f) for f in fields})
    except ValidationError as exc:
        raise ConfigError(describe_errors(TinyModelSpec, exc)) from None
    t0 = time.perf_counter()
    out = make_tiny_model(args.out, spec)
    print(f"tiny model written to {out} in {time.perf_counter() - t0:.1f}s")
    return 0
