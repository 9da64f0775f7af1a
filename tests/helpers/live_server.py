"""An ASGI app on a real loopback port, in a thread of the test process (uvicorn).

Covers: `free_port()` and `serve(app)`, which yields the base URL once the server accepts
connections and stops it afterwards. Used by tests that need real HTTP (engine fakes in
test_engines.py, the evaluation service in test_server_nonfinite.py). Not a library.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(app: Any, start_timeout: float = 10.0) -> Iterator[str]:
    """Run `app` with uvicorn on a free loopback port in a thread; yield its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=max(10.0, start_timeout))
