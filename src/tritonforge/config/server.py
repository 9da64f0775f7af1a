"""Evaluation-server settings: where it listens, how much work it admits, how it protects itself.

Covers: the `ServerConfig` section of `tritonforge serve-eval` (listen address, devices, workers
per device, queue and body limits, bearer token, verdict cache, deadlines, quarantine thresholds,
drain time) and the default `EvalSettings` requests start from. Does not cover: how a candidate
is judged (config.eval) or the server itself (evaluation.server). Imports no torch.
"""

from __future__ import annotations

import ipaddress
import os
from typing import Literal

from pydantic import Field

from tritonforge.config import ConfigError, Section
from tritonforge.config.eval import EvalSettings

TOKEN_ENV = "TRITONFORGE_EVAL_TOKEN"
LOOPBACK_NAMES = {"localhost", "ip6-localhost", "ip6-loopback"}


class ServerConfig(Section):
    """`tritonforge serve-eval`: one HTTP process, one fork server per device."""

    host: str = Field("127.0.0.1", description="listen address; non-loopback needs a token")
    port: int = Field(18188, ge=0, le=65535, description="0 = any free port")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="auto = every visible GPU, else the CPU interpreter"
    )
    gpus: list[int] | None = Field(None, description="CUDA device indices; None = all visible")
    workers: int = Field(
        4, ge=1, le=256, description="concurrent evaluations per device (timing stays exclusive)"
    )
    queue_size: int = Field(
        256, ge=0, description="requests waiting for a worker; beyond this: 429 + Retry-After"
    )
    max_body_bytes: int = Field(4 << 20, ge=1024, description="request bodies above: 413")
    max_batch: int = Field(64, ge=1, description="items in one /v1/eval/batch request")
    token: str | None = Field(
        None, description=f"bearer token (or env {TOKEN_ENV}); required off loopback"
    )
    cache_entries: int = Field(4096, ge=0, description="verdict cache size (LRU); 0 = off")
    cache_skip: list[str] = Field(
        default_factory=lambda: ["internal_error", "judge_fault", "timeout", "crash"],
        description="statuses never cached (they may come from load or a killed worker)",
    )
    default_deadline_s: float = Field(
        1800.0, gt=0, description="answer by then (queue + evaluation) unless a request says"
    )
    max_deadline_s: float = Field(7200.0, gt=0, description="cap of a request's deadline_s")
    quarantine_after: int = Field(
        3, ge=1, description="consecutive judge errors on a device before it is probed"
    )
    reprobe_s: float = Field(120.0, gt=0, description="probe a quarantined device this often")
    drain_timeout_s: float = Field(
        120.0, ge=0, description="graceful shutdown: wait this long for in-flight evaluations"
    )
    warmup: bool = Field(True, description="start the fork servers at startup, not on first use")
    allow_inline_problems: bool = Field(
        True,
        description="accept full problems (reference source runs in this trusted process); "
        "False = only {suite, problem_id} requests",
    )
    eval: EvalSettings = Field(
        default_factory=EvalSettings, description="defaults every request's settings start from"
    )

    def resolved_token(self) -> str | None:
        """The configured token, else the environment's, else None."""
        return self.token or os.environ.get(TOKEN_ENV) or None

    def is_loopback(self) -> bool:
        if self.host.lower() in LOOPBACK_NAMES:
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def check_safe(self) -> None:
        """Refuse to listen beyond loopback without a token."""
        if not self.is_loopback() and not self.resolved_token():
            raise ConfigError(
                f"refusing to listen on {self.host} without a token: set --token, "
                f"`token` in the config or {TOKEN_ENV} (or bind 127.0.0.1)"
            )
