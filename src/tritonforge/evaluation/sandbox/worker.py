"""Worker: the sandboxed child that imports one candidate and runs what the judge asks.

Covers the child side of the protocol: `load` (write the source to scratch, rebuild the init
inputs (a Hugging Face config too), import the Inductor runtime helpers the candidate uses, warm
the profiler, install the seccomp filter, arm the audit, seal the process, import, build
ModelNew with the judge's seed and init inputs), `run` (one correctness trial: inputs from
shared memory, forward under audit, the outputs checked to be plain tensors and copied out
inside the audited scope; the last trial first calls forward once more on the same tensors,
light, for the caching check), `time` (warmup and timed trials: timing_loop.py, the same code
for candidates and references; every timed call's launch signature), `ref_load`/`ref_drop`
(the device's trusted timing process: reference_host.py) and `exit`. Every reply is a JSON
object; failures carry a status name and a trimmed message, and a device out-of-memory error
anywhere in a request (the candidate's code or ours) is answered as `out_of_resources` with the
memory figures of the moment instead of ending the process. Reference outputs never exist here:
the judge keeps them.

Does not cover: isolation (isolation.py, applied before `main`), judging (judge/).
"""

from __future__ import annotations

import gc
import importlib.util
import os
import socket
import sys
import threading
import time
from typing import Any

import torch

from tritonforge.evaluation.sandbox import (
    audit,
    inductor_compat,
    outputs,
    recipe,
    reference_host,
    replay_model,
    replay_provenance,
    sealed,
    seccomp,
    timing_loop,
)
from tritonforge.evaluation.sandbox.classify import (
    classify_exception,
    is_device_oom,
    kernel_codes,
    memory_facts,
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
from tritonforge.evaluation.sandbox.recipe_format import RecipeError, parse_recipe
from tritonforge.types import Status

_GC_ON = gc.enable  # captured in the fork server, before any candidate exists


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
        self.resume_gc = False  # a `time` request turned the collector off until the next one
        self.replay = False  # this worker is a trusted replayer (replay_model.py)

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
            "integrity": audit.integrity(),
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
            self._refuse(
                f"the problem's init inputs cannot be rebuilt in the sandbox: {why}", "import"
            )
            return
        if self.report.refused:
            self._refuse(f"the sandbox refused to run the candidate: {self.report.refused}")
            return
        try:  # Inductor runtime helpers the candidate uses: imported before the thread block
            notes = inductor_compat.prepare(msg.get("preimport") or [])
        except Exception as exc:
            notes = [f"Inductor runtime helpers unavailable here: {type(exc).__name__}: {exc}"]
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
                    "notes": notes,
                    **({"shared": shared} if shared is not None else {}),
                }
            )

    def _refuse(self, why: str, phase: str = "sandbox") -> None:
        """Not the candidate's doing: an internal error before its code is imported."""
        self.reply(
            {"ok": False, "status": Status.INTERNAL_ERROR.value, "phase": phase, "message": why}
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
            recorder = recipe.begin(_flat(inputs), self.device) if msg.get("recipe") else None
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
                recipe.end()
                outs = self._checked(out)
                shared = self.shared_out if msg.get("shared_out") else None
                desc, out_fds = outputs.copy_out(out, shared)  # inside the audited scope
        except BaseException as exc:
            recipe.end()
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
            "compute_log": [list(c) for c in rec.compute_log or []],
            "violations": list(audit.STATE.violations),
            "integrity": audit.integrity(),
        }
        reply = {"ok": True, "outputs": desc, "facts": facts, "audit": record, "seconds": seconds}
        if recorder is not None:  # the call's work as a recipe, for the judge's trusted replay
            reply["recipe"], more = recorder.finish(out)
            out_fds = [*out_fds, *more]
        try:
            self.reply(reply, out_fds)
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

    # -- the trusted replayer (judge/replay.py) ---------------------------------------------------
    def replay_load(self, msg: dict[str, Any], fds: list[int]) -> None:
        """Build the replay model: the judge's kernel module (the candidate's kernels alone),
        its parsed recipe and the constants' bytes. No candidate code but the kernels runs here,
        and the audit is not armed."""
        self.device = msg.get("device", "cpu")
        self.replay = True
        audit.STATE.bounded = True  # interpreted kernels touch only their launch's tensors
        if self.device.startswith("cuda"):
            torch.empty(1, device=self.device)
        shared = self._map_shared(msg["shared"], fds[1:]) if "shared" in msg else None
        try:
            try:
                blob = unpack(msg["blob"], fds[0])[0]
            finally:
                os.close(fds[0])
            recipe = parse_recipe(msg["recipe"])
            path = os.path.join(os.getcwd(), "replay_kernels.py")
            kernels = replay_model.load_kernels(path, msg["module"])
            self.model = replay_model.ReplayModel(recipe, kernels, blob, self.device)
        except Exception as exc:
            self._replay_failed(exc, "replay_load")
            return
        why = seccomp.install()
        if why:
            self.report.warnings.append(why)
        self.reply({"ok": True, **({"shared": shared} if shared is not None else {})})

    def replay_run(self, msg: dict[str, Any], fds: list[int]) -> None:
        """One replayed call on the judge's inputs (constants restored first): its outputs."""
        inputs = self._inputs(msg, fds)
        try:
            self.model.reset()
            with torch.no_grad():
                out = self.model(*inputs)
            self._sync()
            shared = self.shared_out if msg.get("shared_out") else None
            desc, out_fds = outputs.copy_out(out, shared)
        except Exception as exc:
            self._replay_failed(exc, "replay")
            return
        try:
            self.reply({"ok": True, "outputs": desc}, out_fds)
        finally:
            for fd in out_fds:
                os.close(fd)

    def replay_trace(self, msg: dict[str, Any], fds: list[int]) -> None:
        """One replayed call traced (replay_provenance.py): per output, whether every element
        holds data a kernel of this call wrote. Its outputs are not sent (poisoned bytes)."""
        inputs = self._inputs(msg, fds)
        try:
            with torch.no_grad():
                flags = replay_provenance.provenance(self.model, inputs, int(msg["poison"]) & 0xFF)
            self._sync()
        except Exception as exc:
            self._replay_failed(exc, "replay")
            return
        self.reply({"ok": True, "from_kernel": flags})

    def _replay_failed(self, exc: BaseException, phase: str) -> None:
        status = classify_exception(exc, phase, raised_in_kernel(exc, self.kernel_codes))
        if isinstance(exc, (replay_model.ReplayError, RecipeError)):
            status = Status.INTERNAL_ERROR  # the recipe cannot run: the judge says unreplayable
        extra = {"memory": memory_facts(self.device, str(exc))} if is_device_oom(exc) else {}
        message = f"{type(exc).__name__}: {exc}"[:4000]
        self.reply({"ok": False, "status": status.value, "phase": phase, "message": message,
                    "replay": True, **extra})  # fmt: skip

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
            "replay_load": self.replay_load,
            "replay_run": self.replay_run,
            "replay_trace": self.replay_trace,
        }
        while True:
            msg, fds = self.reader.recv(None)
            if self.resume_gc:  # off since the last `time` request's reply (timing_loop.time_op)
                self.resume_gc = False
                _GC_ON()
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


def _flat(inputs: list[Any]) -> list[torch.Tensor]:
    return [t for v in inputs for t in flatten_tensors(v)]


def main(fd: int, spec: dict[str, Any], report: Any) -> int:
    sock = socket.socket(fileno=fd)
    return Worker(sock, spec, report).loop()
