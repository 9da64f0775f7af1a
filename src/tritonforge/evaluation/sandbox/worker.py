"""Worker: the sandboxed child that imports one candidate and runs what the judge asks.

Covers the child side of the protocol: `load` (write the source to scratch, arm the audit, import,
build ModelNew with the judge's seed and init inputs), `run` (one correctness trial: inputs from
shared memory, forward under audit, outputs back through a memfd), `time` (warmup and timed
trials: timing_loop.py, the same code for candidates and references), `ref_load`/`ref_drop`
(the device's trusted timing process: reference_host.py) and `exit`. Every reply is a JSON
object; failures carry a status name and a trimmed message, and a device out-of-memory error
anywhere in a request (the candidate's code or ours) is answered as `out_of_resources` with the
memory figures of the moment instead of ending the process. Reference outputs never exist here:
the judge keeps them.

Does not cover: isolation (sandbox.py, applied before `main`), judging (judge.py).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import time
from typing import Any

import torch

from tritonforge.evaluation.sandbox import audit, inductor_compat, reference_host, timing_loop
from tritonforge.evaluation.sandbox.classify import (
    classify_exception,
    is_device_oom,
    memory_facts,
    raised_in_kernel,
    trim_traceback,
)
from tritonforge.evaluation.sandbox.protocol import (
    Reader,
    flatten_tensors,
    map_tensors,
    pack,
    pack_into,
    send_msg,
    unpack,
    unpack_buffer,
)
from tritonforge.types import Status


def warm_gpu_driver() -> bool:
    """GPU fork servers: load Triton's CUDA driver utilities (compiled with a C compiler on first
    use) here, once, so no worker pays for it. Returns False if that touched CUDA in a way that
    breaks forked children (checked by a throw-away child that must be able to use the GPU)."""
    try:
        from triton.runtime import driver

        driver.active.utils  # noqa: B018 - builds/loads cuda_utils without creating a context
    except Exception:
        return True
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            torch.zeros(1, device="cuda").add_(1)
            torch.cuda.synchronize()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def preload() -> None:
    """Imports and wrappers done once in the fork server, inherited by every worker."""
    import traceback  # noqa: F401

    import torch.profiler

    # Warm the legacy profiler used by the audit (cheap; Kineto is avoided here because it would
    # initialise CUDA in the fork server, and a forked child cannot use CUDA after that).
    # Not on GPU fork servers: on a CUDA build even the legacy profiler initialises the driver,
    # after which forked children cannot use CUDA.
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        with torch.autograd.profiler.profile(use_kineto=False) as prof:
            torch.relu(torch.zeros(4))
        prof.function_events  # noqa: B018
    audit.preload()
    if torch.cuda.is_initialized():
        raise RuntimeError("CUDA was initialised in the fork server; children could not use it")


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
        # per timed model ("" = the candidate): (memfd identity + descriptor, device inputs)
        self.timing_inputs: dict[str, tuple[str, list[Any]]] = {}
        self.references: dict[str, reference_host.Loaded] = {}  # the timing process's models
        self.references_profiled = False
        self.shared_in: torch.Tensor | None = None  # the judge's shared device buffers
        self.shared_out: torch.Tensor | None = None

    # -- helpers -----------------------------------------------------------------------------
    def reply(self, obj: dict[str, Any], fds: list[int] | None = None) -> None:
        send_msg(self.sock, obj, fds)

    def fail(self, exc: BaseException, phase: str) -> None:
        status = classify_exception(exc, phase, raised_in_kernel(exc, self.kernel_codes))
        message = trim_traceback(exc, self.path)
        extra = {"memory": memory_facts(self.device, message)} if is_device_oom(exc) else {}
        self.reply(
            {
                "ok": False,
                "status": status.value,
                "phase": phase,
                "message": message,
                "audit": self._audit_extra(),
                **extra,
            }
        )

    def _audit_extra(self) -> dict[str, Any]:
        audit.tamper_check()
        return {
            "violations": list(audit.STATE.violations),
            "launches_ok": sum(1 for x in audit.STATE.launches if x.ok),
        }

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            audit.STATE.originals["cuda_sync"]()

    def _inputs(self, msg: dict[str, Any], fds: list[int], objects: bool = False) -> list[Any]:
        try:
            if msg.get("shared") and self.shared_in is not None:
                # views of the judge's shared device buffer: no copy at all
                return list(unpack_buffer(msg["inputs"], self.shared_in, True, copy=False))
            # straight from the judge's sealed memfd into device memory
            return list(
                unpack(
                    msg["inputs"], fds[0], keep_strides=True, device=self.device, objects=objects
                )
            )
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
        # (init inputs may hold a Hugging Face config: rebuilt here, before the audit is armed)
        try:
            init_inputs = self._inputs({"inputs": msg["init_inputs"]}, fds[:1], objects=True)
        except Exception as exc:  # the judge's values, not the candidate's doing
            why = f"{type(exc).__name__}: {exc}"[:500]
            self.reply(
                {
                    "ok": False,
                    "status": Status.INTERNAL_ERROR.value,
                    "phase": "import",
                    "message": f"the problem's init inputs cannot be rebuilt in the sandbox: {why}",
                }
            )
            return
        try:  # Inductor runtime helpers the candidate uses, imported before the audit is armed
            notes = inductor_compat.prepare(msg.get("preimport") or [])
        except Exception as exc:
            notes = [f"Inductor runtime helpers unavailable here: {type(exc).__name__}: {exc}"]
        allow = ("triton", "library") if msg.get("backend") == "cuda" else ("triton",)
        audit.arm(self.path, scratch, allow, strict=self.mode == "strict")
        phase = "import"
        try:
            spec = importlib.util.spec_from_file_location("candidate", self.path)
            module = importlib.util.module_from_spec(spec)
            audit.guard_module(module.__dict__)
            sys.modules["candidate"] = module
            spec.loader.exec_module(module)
            self.kernel_codes = _kernel_codes(module)
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
                return
            phase = "init"
            torch.manual_seed(int(msg["init_seed"]))
            model = module.ModelNew(*init_inputs)
            if isinstance(model, torch.nn.Module):
                model = model.to(self.device)
            self.model = model
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            self.fail(exc, phase)
            return
        self.reply(
            {
                "ok": True,
                "sandbox": {
                    "namespaces": self.report.namespaces,
                    "user": self.report.user,
                    "warnings": self.report.warnings,
                },
                "audit": self._audit_extra(),
                "cuda_init_s": cuda_init_s,
                "notes": notes,
                **({"shared": shared} if shared is not None else {}),
            }
        )

    def run(self, msg: dict[str, Any], fds: list[int]) -> None:
        inputs = self._inputs(msg, fds)
        clean = [map_tensors(v, lambda t: t.clone()) for v in inputs]
        cuda = self.device.startswith("cuda")
        t0 = time.perf_counter()
        in_tensors = [t for v in inputs for t in flatten_tensors(v)]
        try:
            # repeat: a first call on the same tensors, its outputs poisoned (caching check)
            poisoned = self._first_call(inputs, in_tensors) if msg.get("repeat") else set()
            with (
                torch.no_grad(),
                audit.forward_scope(
                    profile=bool(msg.get("profile", True)),
                    snapshot=bool(msg.get("snapshot", True)),
                    cuda=cuda,
                    # CUDA activity (CUPTI) only for hybrid mode's custom-kernel share by time
                    cuda_activity=cuda and self.mode == "hybrid",
                ) as box,
            ):
                out = self.model(*inputs)
                self._sync()
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            self.fail(exc, "forward")
            return
        seconds = time.perf_counter() - t0
        rec: audit.ForwardRecord = box["record"]
        audit.tamper_check()
        out_tensors = flatten_tensors(out)
        facts = {
            "mutated": _mutated(inputs, clean),
            "aliased": [
                i for i, o in enumerate(out_tensors) if any(_overlaps(o, x) for x in in_tensors)
            ],
            "provenance": audit.provenance(out_tensors, rec),
            "expanded": [i for i, o in enumerate(out_tensors) if 0 in o.stride() and o.numel() > 1],
            "repeat": bool(msg.get("repeat")),
            "stale": audit.stale(out_tensors, poisoned),
        }
        fds: list[int] = []
        try:
            shared = self.shared_out is not None and msg.get("shared_out")
            desc = pack_into(out, self.shared_out) if shared else None
            if desc is not None:  # straight into the judge's shared output buffer
                desc["shared"] = True
                self._sync()
            else:
                desc, fd = pack(out, seal=False)
                fds.append(fd)
        except Exception as exc:
            self.reply(
                {
                    "ok": False,
                    "status": Status.RUNTIME_ERROR.value,
                    "phase": "forward",
                    "message": f"forward returned a value that cannot be compared: {exc}",
                    "audit": self._audit_extra(),
                }
            )
            return
        record = {
            "launches": len(rec.launches),
            "launches_ok": sum(1 for x in rec.launches if x.ok),
            "kernels": sorted({x.name for x in rec.launches}),
            "wrote_any": any(x.changed for x in rec.launches if x.changed is not None),
            "snapshotted": sum(1 for x in rec.launches if x.changed is not None),
            "ops": rec.ops,
            "glue": rec.glue,
            "custom_share": rec.custom_share,
            "share_basis": rec.share_basis,
            "compute_log": [list(c) for c in rec.compute_log or []],
            "violations": list(audit.STATE.violations),
        }
        try:
            self.reply(
                {"ok": True, "outputs": desc, "facts": facts, "audit": record, "seconds": seconds},
                fds,
            )
        finally:
            for fd in fds:
                os.close(fd)

    def _first_call(self, inputs: list[Any], in_tensors: list[torch.Tensor]) -> set[int]:
        """Forward once on `inputs` (launches counted, tripwires armed, no profile), then poison
        the outputs' storages so the audited second call cannot return them unchanged."""
        audit.STATE.active = audit.STATE.light = True
        try:
            with torch.no_grad():
                first = flatten_tensors(self.model(*inputs))
                self._sync()
        finally:
            audit.STATE.active = audit.STATE.light = False
        poisoned = audit.poison(first, in_tensors)
        self._sync()
        return poisoned

    def time(self, msg: dict[str, Any], fds: list[int]) -> None:
        timing_loop.time_op(self, msg, fds)

    def _timing_inputs(self, key: str, msg: dict[str, Any], fds: list[int]) -> list[Any]:
        return timing_loop.timing_inputs(self, key, msg, fds)

    def loop(self) -> int:
        ops = {
            "load": self.load,
            "run": self.run,
            "time": self.time,
            "ref_load": lambda m, f: reference_host.load(self, m, f),
            "ref_drop": lambda m, f: reference_host.drop(self, m, f),
        }
        while True:
            msg, fds = self.reader.recv(None)
            op = msg.get("op")
            if op == "exit":
                self.reply({"ok": True})
                return 0
            handler = ops.get(op)
            if handler is None:
                self.reply(
                    {
                        "ok": False,
                        "status": Status.INTERNAL_ERROR.value,
                        "message": f"unknown op {op!r}",
                    }
                )
                continue
            try:
                handler(msg, fds)
            except Exception as exc:  # outside the candidate's guarded calls (our copies, ...)
                if not is_device_oom(exc):
                    raise
                self.fail(exc, str(op))


def _kernel_codes(module: Any) -> set:
    """Code objects of the module's @triton.jit bodies (through autotune/heuristics wrappers)."""
    import types

    codes = set()
    for value in vars(module).values():
        if type(value).__name__ not in (
            "JITFunction",
            "InterpretedFunction",
            "Autotuner",
            "Heuristics",
        ):
            continue
        fn = value
        for _ in range(4):
            if isinstance(fn, types.FunctionType):
                codes.add(fn.__code__)
                break
            fn = getattr(fn, "fn", None)
    return codes


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    sa, sb = a.untyped_storage(), b.untyped_storage()
    a0, b0 = sa.data_ptr(), sb.data_ptr()
    return a0 < b0 + sb.nbytes() and b0 < a0 + sa.nbytes()


def _mutated(inputs: list[Any], clean: list[Any]) -> list[int]:
    eq = audit.STATE.originals["torch.equal"]
    out = []
    for i, (a, b) in enumerate(zip(inputs, clean)):
        ta, tb = flatten_tensors(a), flatten_tensors(b)
        for x, y in zip(ta, tb):
            if x.shape != y.shape or not eq(_raw(x), _raw(y)):
                out.append(i)
                break
    return out


def _raw(t: torch.Tensor) -> torch.Tensor:
    """Bytes of a tensor's values (NaN-safe equality)."""
    return t.contiguous().reshape(-1).view(torch.uint8) if t.numel() else t


def main(fd: int, spec: dict[str, Any], report: Any) -> int:
    sock = socket.socket(fileno=fd)
    return Worker(sock, spec, report).loop()
