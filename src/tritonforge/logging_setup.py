"""Structured logging: one formatter for humans, one JSON-lines formatter for machines.

Covers: configuring the `tritonforge` logger tree once per process. Does not cover: metrics
(see training.metrics) or per-step training lines (fixed format, written by the trainer).
"""

from __future__ import annotations

import json
import logging
import sys
import time

_CONFIGURED = False


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in getattr(record, "fields", {}).items():
            payload[key] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


class HumanFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        extra = getattr(record, "fields", {})
        tail = (" " + " ".join(f"{k}={v}" for k, v in extra.items())) if extra else ""
        line = f"{stamp} {record.levelname[0]} {record.name}: {record.getMessage()}{tail}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(level: str = "info", json_lines: bool = False) -> None:
    """Configure the root `tritonforge` logger to stderr (idempotent)."""
    global _CONFIGURED
    logger = logging.getLogger("tritonforge")
    logger.setLevel(level.upper())
    if _CONFIGURED:
        for h in logger.handlers:
            h.setFormatter(JsonFormatter() if json_lines else HumanFormatter())
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else HumanFormatter())
    logger.addHandler(handler)
    logger.propagate = False
    _CONFIGURED = True


def get_logger(name: str) -> logging.Logger:
    """Logger under the `tritonforge` tree; pass structured fields via extra={'fields': {...}}."""
    return logging.getLogger(name if name.startswith("tritonforge") else f"tritonforge.{name}")
