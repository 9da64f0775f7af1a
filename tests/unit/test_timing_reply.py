"""The end of a `time` request in a real Worker: nothing of the candidate's may start device
work that outlives the reply.

Covers: the judge interleaves the candidate's rounds with the reference's rounds in another
process (the device's timing process, another CUDA context that the device time-slices with
this one). Device work the candidate queues after the worker's last device-wide synchronize
would run during the reference's round and inflate the reference's time. What can run the
candidate's code there: finalizers of its timed inputs (released when the request ends), of the
last warmup or timed call's outputs, and of cyclic garbage at the collector's next pass. The
worker therefore synchronizes after every such object of the request is gone, and keeps the
collector off from there until the next request arrives. Here the worker's synchronize is
recorded (on the CPU it has no device to wait for; on a GPU it is the device-wide one, the only
point that waits for such work); the inputs are views of a shared buffer, as on a GPU.
Does not cover: the time-slicing itself (tests/gpu: corpus c3_leftover_after_reply).
"""

from __future__ import annotations

import gc
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from tritonforge.evaluation.sandbox.protocol import Reader, pack_into, send_msg
from tritonforge.evaluation.sandbox.worker import Worker


class _Later:
    """What a candidate hangs on a tensor or leaves as cyclic garbage: code run later."""

    def __init__(self, log: list[str], what: str, cyclic: bool = False) -> None:
        self.log, self.what = log, what
        self.me = self if cyclic else None

    def __del__(self) -> None:
        self.log.append(f"finalizer:{self.what}")


class _Candidate(torch.nn.Module):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(x, "later"):
            x.later = _Later(self.log, "input")
        for _ in range(20):
            _Later(self.log, "cycle", cyclic=True)
        out = torch.relu(x)
        out.later = _Later(self.log, "output")
        return out


@pytest.fixture
def worker() -> Iterator[tuple[Worker, socket.socket, list[str]]]:
    ours, theirs = socket.socketpair()
    log: list[str] = []
    w = Worker(ours, {}, None)
    w.model = _Candidate(log)
    w.shared_in = torch.zeros(4096, dtype=torch.uint8)
    w._sync = lambda: log.append("sync")  # type: ignore[method-assign]
    real_reply, real_recv = w.reply, w.reader.recv

    def reply(obj: dict[str, Any], fds: list[int] | None = None) -> None:
        log.append(f"reply:{'ok' if obj.get('ok') else obj.get('message', '')[:200]}")
        real_reply(obj, fds)

    def recv(deadline: float | None) -> Any:
        got = real_recv(deadline)
        log.append(f"recv:{got[0].get('op')} collector={'on' if gc.isenabled() else 'off'}")
        return got

    w.reply, w.reader.recv = reply, recv  # type: ignore[method-assign]
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    gc.set_threshold(1)  # the collector would run at almost every allocation
    try:
        yield w, theirs, log
    finally:
        gc.set_threshold(*threshold)
        (gc.enable if enabled else gc.disable)()
        ours.close()
        theirs.close()


def test_no_candidate_code_runs_between_the_last_sync_and_the_next_request(worker) -> None:
    w, judge, log = worker
    desc = pack_into([torch.randn(64)], w.shared_in)
    for _ in range(2):  # two rounds, then exit
        send_msg(judge, {"op": "time", "inputs": desc, "shared": True, "warmup": 2,
                         "trials": 3, "budget_ms": 250.0, "clock": "cuda_events"})  # fmt: skip
    send_msg(judge, {"op": "exit"})
    gc.enable()
    assert w.loop() == 0
    reader = Reader(judge)
    for _ in range(3):
        assert reader.recv(5.0)[0]["ok"]
    replies = [i for i, e in enumerate(log) if e.startswith("reply:")]
    assert [log[i] for i in replies] == ["reply:ok"] * 3, log
    for i in replies[:2]:  # each `time` reply: a sync after the candidate's last code ...
        last = max(j for j in range(i) if log[j].startswith("finalizer:"))
        assert "sync" in log[last + 1 : i], " ".join(log[: i + 1])
        after = log[i + 1 :]  # ... and none of it again until the next request is in
        upto = next(k for k, e in enumerate(after) if e.startswith("recv:"))
        assert not any(e.startswith("finalizer:") for e in after[:upto]), after[: upto + 1]
        assert after[upto].endswith("collector=off"), after[upto]
    assert any(e == "finalizer:input" for e in log[: replies[0]]), "the inputs go first"
    assert gc.isenabled(), "the collector is back on once the next request arrived"
    gc.collect()
    assert log.count("finalizer:cycle") == 2 * (2 + 3) * 20  # every call's garbage, at last
