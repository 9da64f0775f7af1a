"""The evaluation HTTP service: FastAPI app factory and uvicorn runner.

Endpoints: POST /v1/eval (one request -> Verdict JSON), POST /v1/eval/batch (list -> list of
verdicts, in order), POST /eval (the original TritonForge/KernelBench request -> KernelExecResult,
see compat.py), GET /health (no auth, never waits on evaluations), GET /v1/devices, GET /metrics.
Evaluations run in the service's thread pool, never in the event loop. Safety: bearer token on
every endpoint but /health when a token is configured; body size limit (413); malformed JSON or
missing fields get a 4xx with a message; a full queue gets 429 + Retry-After; draining or all
devices quarantined gets 503 + Retry-After; a client that disconnects has its queued work dropped.
Does not cover: scheduling, cache and quarantine (service.py), judging (judge/evaluator.py).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import signal
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tritonforge.config.eval import PRESETS, EvalSettings, preset_for_server
from tritonforge.config.server import ServerConfig
from tritonforge.evaluation.service.compat import KernelBenchRequest, to_kernel_exec_result
from tritonforge.evaluation.service.service import (
    EvalService,
    Job,
    QueueFull,
    Unavailable,
    group_jobs,
)
from tritonforge.logging_setup import get_logger
from tritonforge.types import Problem, Verdict

log = get_logger("evaluation.server")

DISCONNECT_POLL_S = 0.5
LOCKED_SETTINGS = {
    "secret_seed": "input seeds are hidden and fixed by the server",
    "sandbox": "isolation is fixed by the server",
}
PLACEMENT_SETTINGS = {"device", "device_index"}  # the server places work; ignored if sent
M = TypeVar("M", bound=BaseModel)


class EvalRequest(BaseModel):
    """POST /v1/eval: a problem (inline, or by suite and id), a candidate, optional overrides."""

    model_config = ConfigDict(extra="forbid")

    problem: Problem | None = None
    suite: str | None = None
    problem_id: str | int | None = None
    size: str | None = Field(None, description="size preset; default cpu on CPU, gpu on CUDA")
    source: str
    preset: str | None = Field(
        None, description="rules to judge by (config.eval.PRESETS); default: the server's"
    )
    settings: dict[str, Any] | None = None
    deadline_s: float | None = Field(None, gt=0)


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


def _fail(code: int, message: str, headers: dict[str, str] | None = None) -> HTTPException:
    return HTTPException(status_code=code, detail=message, headers=headers)


def _validation_message(exc: ValidationError, where: str = "") -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "<body>"
        parts.append(f"{where}{loc}: {err['msg']}")
    return "invalid request: " + "; ".join(parts[:20])


def parse_model(model: type[M], data: Any, where: str = "") -> M:
    if not isinstance(data, dict):
        raise _fail(422, f"invalid request: {where or 'body'} must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _fail(422, _validation_message(exc, where)) from None


def merge_settings(base: EvalSettings, overrides: dict[str, Any] | None) -> EvalSettings:
    """`base` with `overrides` applied (dict values merged one level); 422 on bad keys/values."""
    if not overrides:
        return base.model_copy(deep=True)
    tree = base.model_dump(mode="json")
    for key, value in overrides.items():
        if key in PLACEMENT_SETTINGS:
            continue
        if key in LOCKED_SETTINGS:
            if value is not None and value != tree.get(key):
                raise _fail(422, f"invalid request: settings.{key}: {LOCKED_SETTINGS[key]}")
            continue
        if isinstance(value, dict) and isinstance(tree.get(key), dict):
            tree[key] = {**tree[key], **value}
        else:
            tree[key] = value
    try:
        return EvalSettings.model_validate(tree)
    except ValidationError as exc:
        raise _fail(422, _validation_message(exc, "settings.")) from None


async def read_json(request: Request, limit: int) -> Any:
    """The body as JSON; 413 beyond `limit` bytes, 400 when empty or not JSON."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _fail(413, f"request body of {declared} bytes exceeds the {limit}-byte limit")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _fail(413, f"request body exceeds the {limit}-byte limit")
    if not body.strip():
        raise _fail(400, "empty request body: expected JSON")
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _fail(400, f"malformed JSON: {exc}") from None


class ProblemResolver:
    """Problems by (suite, size, id or name), loaded once per suite and size, off the loop."""

    def __init__(self) -> None:
        self._suites: dict[tuple[str, str], dict[str, Problem]] = {}

    async def get(self, suite: str, size: str, problem_id: str | int) -> Problem:
        key = (suite, size)
        if key not in self._suites:
            self._suites[key] = await asyncio.to_thread(self._load, suite, size)
        table = self._suites[key]
        found = table.get(str(problem_id)) or table.get(f"{suite}/{problem_id}")
        if found is None:
            raise _fail(404, f"suite {suite!r} (size {size}) has no problem {problem_id!r}")
        return found

    @staticmethod
    def _load(suite: str, size: str) -> dict[str, Problem]:
        from tritonforge.problems import load_suite

        try:
            problems = load_suite(suite, size=size)
        except KeyError as exc:
            raise _fail(404, f"unknown suite: {exc}") from None
        except Exception as exc:
            raise _fail(422, f"cannot load suite {suite!r} at size {size!r}: {exc}") from None
        table: dict[str, Problem] = {}
        for p in problems:
            table.setdefault(str(p.problem_id), p)
            table[p.name] = p
            table[p.id] = p
        return table


def _auth_dependency(token: str | None, svc: EvalService):
    def check(request: Request) -> None:
        if token is None:
            return
        scheme, _, cred = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            cred.strip().encode(), token.encode()
        ):
            svc.metrics.rejected.labels("auth").inc()
            raise _fail(
                401,
                "missing or wrong bearer token: send `Authorization: Bearer <token>`",
                {"WWW-Authenticate": "Bearer"},
            )

    return check


async def _unless_gone(request: Request, work: Awaitable[Any]) -> Any:
    """Await `work`; if the client disconnects first, cancel it and raise ClientGone."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                raise ClientGone()
    finally:
        if not task.done():
            task.cancel()


def create_app(cfg: ServerConfig, service: EvalService | None = None) -> FastAPI:
    """The ASGI app. Its lifespan starts the service and drains it on shutdown."""
    svc = service or EvalService(cfg)
    token = cfg.resolved_token()
    resolver = ProblemResolver()
    default_size = "cpu" if svc.devices[0].kind == "cpu" else "gpu"

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await svc.start()
        log.info("evaluation service ready on %s", ", ".join(d.name for d in svc.devices))
        yield
        log.info("draining: %d evaluation(s) queued or running", svc.in_flight)
        await svc.aclose()
        log.info("evaluation service stopped")

    app = FastAPI(
        title="TritonForge evaluation server",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.service = svc
    auth = [Depends(_auth_dependency(token, svc))]

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code in (400, 404, 413, 422):
            reason = "too_large" if exc.status_code == 413 else "bad_request"
            svc.metrics.rejected.labels(reason).inc()
        return JSONResponse({"detail": exc.detail}, exc.status_code, headers=exc.headers)

    @app.exception_handler(QueueFull)
    async def queue_full(request: Request, exc: QueueFull) -> JSONResponse:
        svc.metrics.rejected.labels("queue_full").inc()
        headers = {"Retry-After": str(exc.retry_after)}
        return JSONResponse({"detail": str(exc)}, 429, headers=headers)

    @app.exception_handler(Unavailable)
    async def unavailable(request: Request, exc: Unavailable) -> JSONResponse:
        svc.metrics.rejected.labels("unavailable").inc()
        headers = {"Retry-After": str(exc.retry_after)}
        return JSONResponse({"detail": str(exc)}, 503, headers=headers)

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        svc.metrics.cancelled.inc()
        return Response(status_code=499)

    async def make_job(req: EvalRequest) -> Job:
        if req.problem is not None and (req.suite is not None or req.problem_id is not None):
            raise _fail(422, "invalid request: give either `problem` or `suite` + `problem_id`")
        if req.problem is not None:
            if not cfg.allow_inline_problems:
                raise _fail(403, "this server only accepts problems by `suite` + `problem_id`")
            problem = req.problem
        elif req.suite is not None and req.problem_id is not None:
            problem = await resolver.get(req.suite, req.size or default_size, req.problem_id)
        else:
            raise _fail(
                422,
                "invalid request: missing problem: give `problem` (a full Problem) "
                "or `suite` and `problem_id`",
            )
        base = cfg.eval
        if req.preset is not None:
            if req.preset not in PRESETS:
                raise _fail(
                    422,
                    f"invalid request: preset: unknown {req.preset!r}; known: {sorted(PRESETS)}",
                )
            base = preset_for_server(req.preset, cfg.eval)
        return Job(problem, req.source, merge_settings(base, req.settings), _deadline(req))

    def _deadline(req: EvalRequest) -> float:
        seconds = min(req.deadline_s or cfg.default_deadline_s, cfg.max_deadline_s)
        return time.monotonic() + seconds

    def record(endpoint: str, verdicts: list[Verdict], t0: float) -> None:
        for v in verdicts:
            svc.metrics.requests.labels(endpoint, v.status.value).inc()
        svc.metrics.latency.labels(endpoint).observe(time.monotonic() - t0)

    @app.get("/health")
    async def health() -> JSONResponse:
        state = svc.health()
        return JSONResponse(state, 200 if state["status"] in ("ok", "degraded") else 503)

    @app.get("/v1/devices", dependencies=auth)
    async def devices() -> dict[str, Any]:
        return svc.devices_json()

    @app.get("/metrics", dependencies=auth)
    async def metrics() -> Response:
        return Response(svc.metrics.render(), media_type=svc.metrics.content_type)

    @app.post("/v1/eval", dependencies=auth)
    async def eval_one(request: Request) -> JSONResponse:
        t0 = time.monotonic()
        req = parse_model(EvalRequest, await read_json(request, cfg.max_body_bytes))
        job = await make_job(req)
        verdict = await _unless_gone(request, svc.evaluate(job))
        record("v1_eval", [verdict], t0)
        return JSONResponse(verdict.model_dump(mode="json"))

    @app.post("/v1/eval/batch", dependencies=auth)
    async def eval_batch(request: Request) -> JSONResponse:
        t0 = time.monotonic()
        data = await read_json(request, cfg.max_body_bytes)
        items = (
            data.get("requests") if isinstance(data, dict) and set(data) == {"requests"} else data
        )
        if not isinstance(items, list):
            raise _fail(
                422, 'invalid request: expected a JSON list of eval requests or {"requests": [...]}'
            )
        if len(items) > cfg.max_batch:
            raise _fail(
                422, f"invalid request: batch of {len(items)} exceeds max_batch {cfg.max_batch}"
            )
        jobs = [
            await make_job(parse_model(EvalRequest, it, f"[{i}].")) for i, it in enumerate(items)
        ]
        group_jobs(jobs)  # a batch of one problem (a GRPO group) is timed in one round-robin
        svc.admit(sum(svc.cache.get(svc.cache_key(j)) is None for j in jobs))
        verdicts = await _unless_gone(
            request, asyncio.gather(*(svc.evaluate(j, admitted=True) for j in jobs))
        )
        record("v1_eval_batch", verdicts, t0)
        return JSONResponse([v.model_dump(mode="json") for v in verdicts])

    @app.post("/eval", dependencies=auth)
    async def eval_compat(request: Request) -> JSONResponse:
        t0 = time.monotonic()
        req = parse_model(KernelBenchRequest, await read_json(request, cfg.max_body_bytes))
        if not cfg.allow_inline_problems:
            raise _fail(403, "this server only accepts problems by `suite` + `problem_id`")
        deadline = time.monotonic() + cfg.default_deadline_s
        job = Job(
            req.problem(),
            req.custom_model_src,
            req.settings(cfg.eval),
            deadline,
            req.preferred_device,
        )
        verdict = await _unless_gone(request, svc.evaluate(job))
        record("eval_compat", [verdict], t0)
        return JSONResponse(to_kernel_exec_result(verdict))

    return app


def serve(cfg: ServerConfig, log_level: str = "info") -> int:
    """Run the server in this process until SIGINT/SIGTERM; drains in-flight work on the way out."""
    import uvicorn

    cfg.check_safe()
    app = create_app(cfg)
    config = uvicorn.Config(
        app,
        host=cfg.host,
        port=cfg.port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=int(cfg.drain_timeout_s) or None,
    )
    # uvicorn re-raises the signal that stopped it after its graceful shutdown; with this
    # handler in place a SIGTERM ends in a clean exit 0 once in-flight work is drained.
    previous = signal.signal(signal.SIGTERM, _stopped_by_sigterm)
    try:
        uvicorn.Server(config).run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _stopped_by_sigterm(signum: int, frame: Any) -> None:
    log.info("stopped by SIGTERM after draining")
