"""Worker: the sandboxed child that imports one candidate and runs what the judge asks.

Covers the child side of the protocol: `load` (write the source to scratch, warm the profiler,
install the seccomp filter, arm the audit, seal the process, import, build ModelNew with the
judge's seed and init inputs), `run` (one correctness trial: inputs from shared memory, forward
under audit, the outputs checked to be plain tensors and copied out inside the audited scope;
the last trial first calls forward once more on the same tensors, light, for the caching check),
`time` (warmup and timed trials with captured timers, L2 flush, device-wide synchronize; every
timed call's launch signature) and `exit`. Every reply is a JSON object; failures carry a status
name and a trimmed message. Reference outputs never exist here: the judge keeps them.

Does not cover: isolation (isolation.py, applied before `main`), judging (judge/).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
import threading
import time
from typing import Any

import torch

from tritonforge.evaluation.sandbox import audit, outputs, sealed, seccomp
from tritonforge.evaluation.sandbox.classify import (
    classify_exception,
    kernel_codes,
    raised_in_kernel,
    trim_traceback,
)
from tritonforge.evaluation.sandbox.protocol import (
    Reader,
    flatten_tensors,
    send_msg,
    unpack,
    unpack_buffer,
)
from tritonforge.types import Status

L2_FLUSH_BYTES = 256 * 1024 * 1024


class Worker:
    def __init__(self, sock: socket.socket, spec: dict[str, Any], report: Any):
        self.sock = sock
        self.reader = Reader(sock)
        self.spec = spec
        self.report = report
        self.device = "cpu"
        self.mode = "strict"
        self.model: torch.nn.Module | None = None
        self.path = ""
        self.kernel_codes: set = set()
        self.flush: torch.Tensor | None = None
        self.timing_inputs: tuple[str, list[Any]] | None = None  # (descriptor, device inputs)
        self.shared_in: torch.Tensor | None = None  # the judge's shared device buffers
        self.shared_out: torch.Tensor | None = None

    # -- helpers -----------------------------------------------------------------------------
    def reply(self, obj: dict[str, Any], fds: list[int] | None = None) -> None:
        send_msg(self.sock, obj, fds)

    def fail(self, exc: BaseException, phase: str) -> None:
        status = classify_exception(exc, phase, raised_in_kernel(exc, self.kernel_codes))
        self.reply(
            {
                "ok": False,
                "status": status.value,
                "phase": phase,
                "message": trim_traceback(exc, self.path),
                "audit": self._audit_extra(),
            }
        )

    def _audit_extra(self) -> dict[str, Any]:
        audit.tamper_check()
        return {
            "violations": list(audit.STATE.violations),
            "launches_ok": sum(1 for x in audit.STATE.launches if x.ok),
            "integrity": audit.integrity(),
        }

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            audit.STATE.originals["cuda_sync"]()

    def _inputs(self, msg: dict[str, Any], fds: list[int]) -> list[Any]:
        try:
            if msg.get("shared") and self.shared_in is not None:
                # views of the judge's shared device buffer: no copy at all
                return list(unpack_buffer(msg["inputs"], self.shared_in, True, copy=False))
            # straight from the judge's sealed memfd into device memory
            return list(unpack(msg["inputs"], fds[0], keep_strides=True, device=self.device))
        finally:
            for fd in fds:
                os.close(fd)

    def _map_shared(self, want: Any, fds: list[int]) -> dict[str, Any]:
        """Map the judge's two shared device buffers (before any candidate code runs) and echo
        its token from the input buffer into the output buffer. Returns what to report."""
        from tritonforge.evaluation.sandbox.devshare import (
            TOKEN_BYTES,
            DevShareError,
            ImportedBuffer,
        )

        try:
            if not isinstance(want, dict) or len(fds) != 2:
                raise DevShareError("malformed shared-buffer offer")
            sizes = [int(want[k]) for k in ("in", "in_size", "out", "out_size")]
            # each ImportedBuffer owns (and closes) the fd it is given, even when it fails
            inp = ImportedBuffer(fds.pop(0), self.device, sizes[0], sizes[1])
            out = ImportedBuffer(fds.pop(0), self.device, sizes[2], sizes[3])
            self.shared_in, self.shared_out = inp.tensor(), out.tensor()
            token = self.shared_in[:TOKEN_BYTES].clone()
            self.shared_out[:TOKEN_BYTES].copy_(token)
            self._sync()
            return {"token": bytes(token.cpu().tolist()).hex()}
        except (DevShareError, RuntimeError, ValueError, KeyError, TypeError) as exc:
            self.shared_in = self.shared_out = None
            return {"error": f"{type(exc).__name__}: {exc}"[:500]}
        finally:
            for fd in fds:
                os.close(fd)

    # -- ops -----------------------------------------------------------------------------------
    def load(self, msg: dict[str, Any], fds: list[int]) -> None:
        self.device = msg.get("device", "cpu")
        self.mode = msg.get("mode", "strict")
        scratch = os.getcwd()
        self.path = os.path.join(scratch, "candidate.py")
        with open(self.path, "w") as f:
            f.write(msg["source"])
        t0 = time.perf_counter()
        if self.device.startswith("cuda"):  # initialise CUDA before the candidate: not its time
            torch.empty(1, device=self.device)
        cuda_init_s = time.perf_counter() - t0
        shared = self._map_shared(msg["shared"], fds[1:]) if "shared" in msg else None
        init_inputs = self._inputs({"inputs": msg["init_inputs"]}, fds[:1])
        if self.report.refused:
            self._refuse(self.report.refused)
            return
        self._warm_up()
        why = seccomp.install()  # no new thread from here on (and no mknod, io_uring, ptrace...)
        if why:
            self.report.warnings.append(why)
        allow = ("triton", "library") if msg.get("backend") == "cuda" else ("triton",)
        audit.arm(self.path, scratch, allow, strict=self.mode == "strict")
        sealed.seal()
        if self._import_candidate(msg, init_inputs):
            self.reply(
                {
                    "ok": True,
                    "sandbox": {
                        "namespaces": self.report.namespaces,
                        "user": self.report.user,
                        "warnings": self.report.warnings,
                        "threads": threading.active_count(),
                    },
                    "audit": self._audit_extra(),
                    "cuda_init_s": cuda_init_s,
                    **({"shared": shared} if shared is not None else {}),
                }
            )

    def _refuse(self, why: str) -> None:
        self.reply(
            {
                "ok": False,
                "status": Status.INTERNAL_ERROR.value,
                "phase": "sandbox",
                "message": f"the sandbox refused to run the candidate: {why}",
            }
        )

    def _warm_up(self) -> None:
        """Before the thread block: start and stop the audit's profiler once (with shapes, as
        hybrid mode uses it) and, for hybrid candidates on a GPU, create the cuBLAS and cuDNN
        handles PyTorch's matmuls and convolutions need, so whatever threads these libraries
        make on first use exist before the candidate runs."""
        with torch.autograd.profiler.profile(use_kineto=False, record_shapes=True) as prof:
            torch.zeros(2, device=self.device).add_(1)
        prof.function_events  # noqa: B018
        if self.device.startswith("cuda") and self.mode == "hybrid":
            with torch.no_grad():
                a = torch.ones(8, 8, device=self.device)
                torch.mm(a, a)
                torch.nn.functional.conv2d(a.view(1, 1, 8, 8), a[:3, :3].reshape(1, 1, 3, 3))
            self._sync()

    def _import_candidate(self, msg: dict[str, Any], init_inputs: list[Any]) -> bool:
        phase = "import"
        try:
            spec = importlib.util.spec_from_file_location("candidate", self.path)
            module = importlib.util.module_from_spec(spec)
            audit.guard_module(module.__dict__)
            sys.modules["candidate"] = module
            spec.loader.exec_module(module)
            self.kernel_codes = kernel_codes(module)
            if not isinstance(getattr(module, "ModelNew", None), type):
                self.reply(
                    {
                        "ok": False,
                        "status": Status.MISSING_MODEL_NEW.value,
                        "phase": "import",
                        "message": "the file defines no class ModelNew",
                        "audit": self._audit_extra(),
                    }
                )
                return False
            phase = "init"
            torch.manual_seed(int(msg["init_seed"]))
            model = module.ModelNew(*init_inputs)
            if isinstance(model, torch.nn.Module):
                model = model.to(self.device)
            self.model = model
            return True
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            self.fail(exc, phase)
            return False

    def run(self, msg: dict[str, Any], fds: list[int]) -> None:
        inputs = self._inputs(msg, fds)
        clean = outputs.clean_copies(inputs)
        ptrs = outputs.input_ptrs(inputs)
        t0 = time.perf_counter()
        try:
            # repeat: a first call on the same tensors, its outputs poisoned (caching check)
            first = self._first_call(inputs, ptrs) if msg.get("repeat") else None
            audit.begin_call(ptrs)
            with (
                torch.no_grad(),
                audit.forward_scope(
                    profile=bool(msg.get("profile", True)),
                    snapshot=bool(msg.get("snapshot", True)),
                    cuda=self.device.startswith("cuda"),
                    shapes=self.mode == "hybrid",  # op shapes: the judge's work estimate
                ) as box,
            ):
                out = self.model(*inputs)
                self._sync()
                outs = self._checked(out)
                shared = self.shared_out if msg.get("shared_out") else None
                desc, out_fds = outputs.copy_out(out, shared)  # inside the audited scope
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            self.fail(exc, "forward")
            return
        seconds = time.perf_counter() - t0
        rec: audit.ForwardRecord = box["record"]
        audit.tamper_check()
        facts = outputs.facts(inputs, clean, outs, rec, first[0] if first else None)
        if first is not None:
            facts["first_signature"], facts["first_launches"] = first[1], first[2]
        record = {
            "launches": len(rec.launches),
            "launches_ok": sum(1 for x in rec.launches if x.ok),
            "kernels": sorted({x.name for x in rec.launches}),
            "wrote_any": any(x.changed for x in rec.launches if x.changed is not None),
            "snapshotted": sum(1 for x in rec.launches if x.changed is not None),
            "ops": rec.ops,
            "glue": rec.glue,
            "op_shapes": rec.shapes,
            "violations": list(audit.STATE.violations),
            "integrity": audit.integrity(),
        }
        try:
            self.reply(
                {"ok": True, "outputs": desc, "facts": facts, "audit": record, "seconds": seconds},
                out_fds,
            )
        finally:
            for fd in out_fds:
                os.close(fd)

    def _checked(self, out: Any) -> list[torch.Tensor]:
        """The output tensors; a value that is not plain tensors is a named violation."""
        try:
            return sealed.output_tree(out)
        except sealed.OutputRejected as exc:
            audit.violation("output_type", str(exc))
            raise

    def _first_call(self, inputs: list[Any], ptrs: dict[int, int]) -> tuple[set[int], str, int]:
        """Forward once on `inputs` (launches counted with their signature, tripwires armed, no
        profile), then poison the outputs' storages so the audited second call cannot return
        them unchanged. Returns (poisoned ptrs, signature digest, launches)."""
        audit.begin_call(ptrs)
        with torch.no_grad(), audit.light_scope():
            out = self.model(*inputs)
            self._sync()
        outs = self._checked(out)
        digest, n = outputs.call_digest(outs)
        with sealed.guard():
            in_tensors = [t for v in inputs for t in flatten_tensors(v)]
            poisoned = audit.poison(outs, in_tensors)
        self._sync()
        return poisoned, digest, n

    def time(self, msg: dict[str, Any], fds: list[int]) -> None:
        # Every timing round of one evaluation sends the same case (the same memfd, dup'ed):
        # reuse the device copy. The key names the memfd itself, not only the tensors' geometry.
        key = (
            f"{os.fstat(fds[0]).st_ino}:{json.dumps(msg['inputs'], sort_keys=True)}" if fds else ""
        )
        if key and self.timing_inputs is not None and self.timing_inputs[0] == key:
            for fd in fds:
                os.close(fd)
            inputs = self.timing_inputs[1]
        else:
            inputs = self._inputs(msg, fds)  # views of the shared buffer when there are no fds
            self.timing_inputs = (key, inputs) if key else None
        if self.device.startswith("cuda") and self.flush is None:
            self.flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=self.device)
        try:
            times, launches, sigs = self._timed_calls(inputs, msg)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            self.fail(exc, "timing")
            return
        self.reply(
            {
                "ok": True,
                "times_ms": times,
                "launches": launches,
                "signatures": sigs,
                "audit": self._audit_extra(),
            }
        )

    def _timed_calls(
        self, inputs: list[Any], msg: dict[str, Any]
    ) -> tuple[list[float], list[int], list[str]]:
        """Warmup, then timed calls, each audited cheaply: its launches and their signature."""
        perf_ns = audit.STATE.originals["perf_counter_ns"]
        ptrs = outputs.input_ptrs(inputs)
        times, launches, sigs = [], [], []
        with torch.no_grad():
            for _ in range(int(msg.get("warmup", 3))):
                audit.begin_call(ptrs)
                with audit.light_scope():
                    self._checked(self.model(*inputs))
            self._sync()
            for _ in range(int(msg.get("trials", 10))):
                if self.flush is not None:
                    with sealed.guard():
                        sealed.CAP.zero_(self.flush)
                self._sync()
                audit.begin_call(ptrs)
                audit.STATE.launch_count = 0
                with audit.light_scope():
                    t0 = perf_ns()
                    out = self.model(*inputs)
                    self._sync()  # device-wide: side-stream work is included
                    t1 = perf_ns()
                times.append((t1 - t0) / 1e6)
                launches.append(audit.STATE.launch_count)
                sigs.append(outputs.call_digest(self._checked(out))[0])
                del out
        return times, launches, sigs

    def loop(self) -> int:
        while True:
            msg, fds = self.reader.recv(None)
            op = msg.get("op")
            if op == "load":
                self.load(msg, fds)
            elif op == "run":
                self.run(msg, fds)
            elif op == "time":
                self.time(msg, fds)
            elif op == "exit":
                self.reply({"ok": True})
                return 0
            else:
                self.reply(
                    {
                        "ok": False,
                        "status": Status.INTERNAL_ERROR.value,
                        "message": f"unknown op {op!r}",
                    }
                )


def main(fd: int, spec: dict[str, Any], report: Any) -> int:
    sock = socket.socket(fileno=fd)
    return Worker(sock, spec, report).loop()
