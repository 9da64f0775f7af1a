"""The inputs of a `time` request in a worker: the device copy of a timing case, made once.

Covers: `timing_inputs`. A candidate's inputs come with each request (a memfd, cached by its
inode and layout, or views of the judge's shared buffer); the timing process's references name
their case by the judge's ident and get its inputs with `ref_load` (or, when another
evaluation's load replaced them, with the `time` request itself), through a shared device
buffer kept mapped as the inputs, or a memfd.
Does not cover: the timing loop (timing_loop.py), the judge's side (judge/ref_timer.py).
"""

from __future__ import annotations

import os
from typing import Any

from tritonforge.evaluation.sandbox import captured as cap
from tritonforge.evaluation.sandbox.protocol import unpack_buffer


def timing_inputs(w: Any, key: str, msg: dict[str, Any], fds: list[int]) -> list[Any]:
    """The device copy of a timing case, made once per case and model `key` ("" = the
    candidate), reused by every round. The timing process's references name their case
    (`case`, the judge's ident): its inputs come with `ref_load` only, through a shared device
    buffer (`shared_inputs`: kept mapped as the inputs themselves) or a memfd. The candidate's
    come with each request; their cache key names the memfd itself, not only the tensors'
    geometry. Closes `fds`."""
    named = bool(key) and "case" in msg
    if named:
        ident = f"case:{msg['case']}"
    else:
        ident = (
            f"{cap.fstat(fds[0]).st_ino}:{cap.dumps(msg['inputs'], sort_keys=True)}" if fds else ""
        )
    held = w.timing_inputs.get(key)
    if ident and held is not None and held[0] == ident:
        for fd in fds:
            os.close(fd)
        return held[1]
    if named and not fds:
        raise ValueError(f"the timing inputs of case {msg['case']} were never loaded for {key}")
    w.timing_inputs.pop(key, None)  # the old copy goes before the new one is made
    if msg.get("shared_inputs") and fds:
        inputs = _shared_inputs(w, msg, fds)
    else:
        inputs = w._inputs(msg, fds)  # views of the shared buffer when there are no fds
    if ident:
        w.timing_inputs[key] = (ident, inputs)
    return inputs


def _shared_inputs(w: Any, msg: dict[str, Any], fds: list[int]) -> list[Any]:
    """Views of the judge's shared device buffer (the timing process only: it is trusted and
    the judge gave up its side): the mapping is released when the last view is gone."""
    from tritonforge.evaluation.sandbox.devshare import ImportedBuffer

    want = msg["shared_inputs"]
    fd, rest = fds[0], fds[1:]
    for extra in rest:
        os.close(extra)
    buf = ImportedBuffer(fd, w.device, int(want["nbytes"]), int(want["size"]))
    return list(unpack_buffer(msg["inputs"], buf.tensor(), True, copy=False))
