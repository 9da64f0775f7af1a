"""Inference servers (vLLM, SGLang, any HTTP server) launched by Ray actors on their GPUs.

Covers: `EngineServer` (the actor class: starts `command` with `{host}`, `{port}`, `{model}`
filled in, in its own process group, with a parent-death signal so it never outlives the actor;
waits until GET `health_path` answers 200; `url()`, `alive()`, `stop()` which ends only the
process group it started) and `fill_command`. The rollout workers reach the servers through
the usual HTTP engines (scale.actors.worker_engine_config gives each worker its own servers).
Does not cover: weight updates (the engines' own HTTP calls) or the placement of the actors.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from tritonforge.config.scale import ServerRole
from tritonforge.logging_setup import get_logger

__all__ = ["EngineServer", "fill_command"]

log = get_logger(__name__)
_PR_SET_PDEATHSIG = 1


def fill_command(command: list[str], host: str, port: int, model: str) -> list[str]:
    """argv with {host}, {port} and {model} replaced."""
    return [a.format(host=host, port=port, model=model) for a in command]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


class EngineServer:
    """One server process owned by this actor (see the module docstring)."""

    def __init__(self, role_json: str, model: str, index: int, log_dir: str) -> None:
        self.role = ServerRole.model_validate_json(role_json)
        if not self.role.command:
            raise ValueError("scale.servers.command is empty")
        self.host = self.role.host or _node_ip()
        self.port = _free_port()
        self.index = index
        self.argv = fill_command(self.role.command, self.host, self.port, model)
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        self.log_path = Path(log_dir) / f"server-{index}.log"
        env = {**os.environ, **self.role.env}
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        log.info("server starting", extra={"fields": {"argv": self.argv, "pid": self.proc.pid}})

    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def wait_ready(self) -> dict[str, Any]:
        """Poll the health path until 200 (or the process exits, or the startup timeout)."""
        import httpx

        deadline = time.monotonic() + self.role.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; {self._tail()}")
            try:
                r = httpx.get(self.url() + self.role.health_path, timeout=5.0)
                if r.status_code == 200:
                    return {"url": self.url(), "pid": self.proc.pid, "index": self.index}
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(
            f"server not healthy after {self.role.startup_timeout_s}s; {self._tail()}"
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM then SIGKILL to the process group started here; returns the exit code."""
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        return self.proc.poll()

    def _tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _node_ip() -> str:
    try:
        import ray

        return str(ray.util.get_node_ip_address())
    except Exception:
        return "127.0.0.1"
