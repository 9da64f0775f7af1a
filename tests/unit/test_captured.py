"""What the worker uses once the candidate is imported is captured before (sandbox/captured.py).

Covers: the captured codec writes what `json.dumps(obj, separators=(",", ":"))` writes and reads
it back (trailing data refused); in a throw-away process set up like the fork server
(`private_builtins()` before the worker's modules are imported): after rebinding `json.dumps`,
`json.loads`, `struct.pack`, `socket.socket.sendall`/`sendmsg` (on the Python class),
`hashlib.sha256`, `secrets.token_hex`, `os.urandom` and builtins (`sorted`, `len`), the bytes the
worker sends, its signature and glue digests and its marker tokens are unchanged, and the
worker's modules look builtins up in a namespace that is not the shared one. Does not cover: the
attacks as candidates (tests/eval/test_attacks_runtime.py).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import pytest

from tritonforge.evaluation.sandbox import captured


def test_codec_matches_json() -> None:
    obj = {"ok": True, "a": [1, 2.5, None, 'é"', {"b": (1, 2)}], "n": -3, 7: "k"}
    assert captured.dumps(obj) == json.dumps(obj, separators=(",", ":"))
    keyed = {"b": 1, "a": {"d": 2, "c": 3}}
    assert captured.dumps(keyed, sort_keys=True) == json.dumps(
        keyed, separators=(",", ":"), sort_keys=True
    )
    back = captured.loads(captured.dumps({"x": [float("nan"), float("inf")]}))
    assert math.isnan(back["x"][0]) and back["x"][1] == float("inf")
    for bad in ('{"a": 1} x', "", "[1,"):
        with pytest.raises(ValueError):
            captured.loads(bad)


PROBE = """
import builtins, hashlib, json, os, secrets, socket, struct, sys
from tritonforge.evaluation.sandbox import captured
captured.private_builtins()  # as the fork server does, before the worker's modules
from tritonforge.evaluation.sandbox import glue, outputs, protocol, sealed

def frame(sock_pair_send):
    a, b = socket.socketpair()
    sock_pair_send(a)
    data = b.recv(1 << 16)
    a.close(); b.close()
    return data

obj = {"ok": True, "audit": {"ops": {"aten::relu": 1}, "violations": ["x: y"]}}
send = lambda s: protocol.send_msg(s, obj)
before = {
    "frame": frame(send).hex(),
    "sig": outputs.signature_digest(["k|(1,)||in0,out0"]),
    "glue": glue.glue_digest(),
}
tokens = {sealed.new_token() for _ in range(3)}

json.dumps = lambda o, *a, **k: '{"ok":true,"audit":{"ops":{},"violations":[]}}'
json.loads = lambda *a, **k: {}
struct.pack = lambda *a: b"\\0\\0\\0\\0"
socket.socket.sendall = lambda self, data: None
socket.socket.sendmsg = lambda self, *a: 0
hashlib.sha256 = lambda *a, **k: None
secrets.token_hex = lambda n=None: "00" * 8
os.urandom = lambda n: b"\\0" * n
real_sorted, real_len = builtins.sorted, builtins.len
builtins.sorted = lambda *a, **k: []
builtins.len = lambda *a: 0
after = {
    "frame": frame(send).hex(),
    "sig": outputs.signature_digest(["k|(1,)||in0,out0"]),
    "glue": glue.glue_digest(),
}
tokens_after = {sealed.new_token() for _ in range(3)}
builtins.sorted, builtins.len = real_sorted, real_len
print(json.JSONEncoder().encode({
    "same": before == after,
    "before": before, "after": after,
    "tokens": real_len(tokens) == 3 and real_len(tokens_after) == 3 and "00" * 8 not in tokens_after,
    "private": protocol.send_msg.__builtins__ is not builtins.__dict__,
}))
"""


def test_rebinding_changes_nothing_the_worker_sends(tmp_path) -> None:
    (tmp_path / "probe.py").write_text(textwrap.dedent(PROBE))
    res = subprocess.run(
        [sys.executable, "probe.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["same"], out
    assert out["tokens"] and out["private"], out
