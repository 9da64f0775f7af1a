"""Inference engines: one async interface (token ids in; token ids, logprobs, status out).

Covers: re-exporting the interface from `base` (SamplingParams, Engine, EngineConfig, ENGINES,
build_engine). Backends live in hf.py (in-process transformers), vllm.py, sglang.py (HTTP
clients) and balancer.py; they are imported lazily through the registry, so importing this
package does not import torch.
"""

from tritonforge.rollout.engines.base import (
    ENGINES,
    Engine,
    EngineConfig,
    SamplingParams,
    build_engine,
)

__all__ = ["ENGINES", "Engine", "EngineConfig", "SamplingParams", "build_engine"]
