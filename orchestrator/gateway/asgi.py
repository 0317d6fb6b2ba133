"""The gateway's HTTP face (Starlette; uvicorn serves it): `/v1/models`, every other `/v1/...`
POST passed to the server of the model the body names, `/metrics`, `/health`.

A reply is passed through as it comes, chunk by chunk (httpx streams it from the engine). A
client that goes away cancels the relay, which closes the engine's connection, and the engine
drops the request. An engine that dies mid-stream gives the client an error event; one that
sends nothing within a bound (gateway/bounds.py) gives it a 504 and is failed. A stream that
ends in an error ends with `data: [DONE]` too. With keys set, every path but `/health` needs
`Authorization: Bearer KEY`; keys are never logged and never reach a label.
"""

from __future__ import annotations

import contextlib
import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from specctl.orchestrator import http
from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.gateway import errors, intake, paths
from specctl.orchestrator.gateway.bounds import Bounds, Hung, ShuttingDown
from specctl.orchestrator.gateway.engines import Engine
from specctl.orchestrator.gateway.errors import error
from specctl.orchestrator.gateway.idle import IdleTuner
from specctl.orchestrator.gateway.intake import MAX_BODY as MAX_BODY
from specctl.orchestrator.gateway.keep import Keeper
from specctl.orchestrator.gateway.line import Busy
from specctl.orchestrator.gateway.owned import Ledger
from specctl.orchestrator.gateway.pool import NotReady, Pool, StartFailed, Unknown
from specctl.orchestrator.gateway.room import NoRoom
from specctl.orchestrator.gateway.watch import Watch
from specctl.orchestrator.measure.route import classify, learned

RETRY_AFTER = 10


class Guarded(Response):
    """A reply made by `serve` while the client is listened to: a client that goes away cancels
    `serve` wherever it is (waiting for a server to start, for a non-streamed completion's
    headers, between two chunks), which closes the engine's connection, and the engine drops
    the request. A non-streamed completion sends nothing until it is done, so the disconnect
    must not wait for the next chunk to be noticed."""

    def __init__(self, serve: Callable[[Scope, Send], Awaitable[None]]) -> None:
        self.serve = serve

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tasks:
            async def respond() -> None:
                with contextlib.suppress(OSError):  # the client went away while we sent
                    await self.serve(scope, send)
                tasks.cancel_scope.cancel()

            tasks.start_soon(respond)
            while (await receive())["type"] != "http.disconnect":
                pass
            tasks.cancel_scope.cancel()


async def _never() -> Message:
    """The `receive` of the responses `Guarded` sends: it alone reads the client."""
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


def authorized(request: Request, keys: Sequence[str]) -> bool:
    if not keys:
        return True
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    return scheme.lower() == "bearer" and any(
        hmac.compare_digest(token.strip().encode(), k.encode()) for k in keys)


def event(message: str, status: int) -> bytes:
    """An error as a server-sent event (what OpenAI's streams send; the openai client raises),
    and the stream's end."""
    body = {"error": {"message": message, "type": "server_error", "code": status}}
    return f"data: {json.dumps(body)}\n\ndata: [DONE]\n\n".encode()


STOPPING = "the gateway is shutting down; try again shortly"


@dataclass(frozen=True)
class _Seen:
    """A request as its relay saw it start: arrival, when it was sent, its facts, its load."""

    arrived: float
    sent: float
    facts: classify.Facts
    load: int


class Gateway:
    def __init__(self, pool: Pool, tuner: IdleTuner | None, keys: Sequence[str],
                 url: str = "", ledger: Ledger | None = None, bounds: Bounds | None = None,
                 keeper: Keeper | None = None, warm: bool = False) -> None:
        self.pool, self.tuner, self.keys, self.warm = pool, tuner, tuple(keys), warm
        self.keeper = keeper or Keeper(pool.plans.app.dirs, pool.say)  # the kept traffic
        self.url, self.ledger = url, ledger  # the state file: engines, routes for `status`
        self.bounds = bounds or Bounds()
        self.client: httpx.AsyncClient | None = None
        self._backends = paths.Backends(pool)

    def app(self) -> Starlette:
        app = Starlette(routes=[
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/gateway/status", self.status, methods=["GET"]),
            Route("/v1/{rest:path}", self.forward, methods=["POST"]),
        ], lifespan=self.lifespan, middleware=[Middleware(errors.Catch, say=self.pool.say)],
            exception_handlers={HTTPException: errors.http_error})
        app.router.redirect_slashes = False  # `/v1` is a 404 JSON, not a redirect to `/v1/`
        return app

    @asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        # A connection per request: an idle keep-alive connection holds one of llama-server's
        # few HTTP threads (slots + 2), and one it closed meanwhile is a 502 to the client
        # (RemoteProtocolError: disconnected without a response). A local connect costs less
        # than a millisecond.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
        timeout = httpx.Timeout(connect=10.0, read=None, write=60.0, pool=None)  # bounds.py
        async with httpx.AsyncClient(limits=limits, timeout=timeout) as client, \
                anyio.create_task_group() as tasks:
            self.client = client
            tasks.start_soon(self._clock)
            if self.warm:
                await self.pool.warm()
            try:
                yield
            finally:
                self.bounds.stop()  # (a stop signal did it already: see run.py)
                tasks.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    if self.tuner is not None:
                        await anyio.to_thread.run_sync(self.tuner.close)
                    await self.pool.close()
                    await anyio.to_thread.run_sync(self.keeper.close)
                if self.ledger is not None:
                    self.ledger.close()

    async def _clock(self) -> None:
        while True:
            await anyio.sleep(self.pool.options.tick)
            await self.pool.tick()
            if self.tuner is not None:
                self.tuner.tick()
            if self.ledger is not None:  # the routes and live tables, for `specctl status`:
                # read here (on the loop, beside the pool), written (fsync'd) off it
                await anyio.to_thread.run_sync(self.ledger.routes, self.routes())
            await anyio.to_thread.run_sync(self.pool.plans.remember,  # the served figures
                                           self.pool.plans.changed())

    # -- routes --------------------------------------------------------------------------
    async def health(self, _request: Request) -> Response:
        """200 once serving; with `warm`, 503 while its servers start and 500 when one could
        not (a supervisor that waits for health takes it as a failed start, and says why)."""
        if self.warm:
            state = self.pool.warmed()
            if state is None:
                return JSONResponse({"status": "starting"}, 503)
            if state:
                return JSONResponse({"status": "failed", "error": state}, 500)
        return JSONResponse({"status": "ok"})

    async def metrics(self, request: Request) -> Response:
        if not authorized(request, self.keys):
            return self._denied()
        return Response(self.pool.metrics.render(),
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    async def models(self, request: Request) -> Response:
        if not authorized(request, self.keys):
            return self._denied()
        data = []
        for name, profile in sorted(self.pool.profiles.items()):
            up = [e for s, e in self.pool.current.items() if s.model == name]
            route = self.pool.plans.served[name].routing.route
            setting = route.describe() if route else up[0].setting if up else None
            data.append({"id": name, "object": "model", "created": 0, "owned_by": "specctl",
                         "description": profile.description,
                         "running": any(e.usable for e in up), "setting": setting})
        return JSONResponse({"object": "list", "data": data})

    async def status(self, request: Request) -> Response:
        if not authorized(request, self.keys):
            return self._denied()
        now = self.pool.clock()
        up = self.pool.resident()
        rows = [{"model": e.model, "setting": e.setting, "port": e.plan.port,
                 "state": e.state.value if e.handle is None or e.handle.alive else "exited",
                 "inflight": e.inflight, "idle_s": round(now - e.last_used, 1),
                 "bytes": e.plan.memory.device_bytes, "k_source": e.plan.k_source} for e in up]
        budget = self.pool.budget_for(up) if up else self.pool.options.budget
        return JSONResponse({"engines": rows, "budget_bytes": budget,
                             "models": sorted(self.pool.profiles), "routes": self.routes()})

    def routes(self) -> dict[str, Any]:
        """Each model's route, the load it sees, and what its served requests told per kind
        and load (measure/route/learned.Learned.rows)."""
        out = {}
        for model, served in sorted(self.pool.plans.served.items()):
            found = served.routing
            route = found.route
            out[model] = {"route": route.describe() if route else None, "why": found.why,
                          "memory": route.memory() if route else None,
                          "load": self.pool.load_line(model),
                          "kinds": served.learned.rows() if served.learned else []}
        return out

    async def forward(self, request: Request) -> Response:
        """A POST below /v1/: keys, then the path (404 unless an adapter declares it, before
        the body is read), the body (intake), the model, its adapter's paths; then the relay
        to the engine, of the canonical path and body, whose error answers are rewritten."""
        pending = intake.has_body(request.headers)
        if not authorized(request, self.keys):
            return self._denied(close=pending)
        path = paths.canonical(request.scope["path"])
        if path not in paths.declared():
            return self._no_path(request, close=pending)
        try:
            checked = await intake.accept(request, path, self.pool.profiles)
        except errors.Refused as exc:
            return exc.response()
        data, model = checked.data, checked.model
        adapter = await self._backends.of(model)
        if adapter is not None and path not in adapter.openai_paths:
            return self._no_path(request, adapter=adapter, model=model)
        canonical = Request({**request.scope, "path_params": {"rest": path},
                             "query_string": b""}, request.receive)
        return Guarded(lambda scope, send: self._serve(
            canonical, model, data, checked.raw, scope,
            errors.EngineErrors(scope, send, adapter, model)))

    def _no_path(self, request: Request, adapter: Adapter | None = None, model: str = "",
                 close: bool = False) -> Response:
        said = errors.quote(request.scope["path"])
        if adapter is None:
            message = f"no such path: {said}; {errors.served()}"
        else:
            has = ", ".join(f"/v1/{p}" for p in sorted(adapter.openai_paths))
            message = f"{model}'s server has no {said}; it serves {has}"
        return error(404, message, headers={"Connection": "close"} if close else None,
                     code="unknown_path")

    # -- the relay -----------------------------------------------------------------------
    async def _serve(self, request: Request, model: str, data: dict[str, Any], body: bytes,
                     scope: Scope, send: Send) -> None:
        arrived = self.pool.clock()
        if self.tuner is not None:
            await anyio.to_thread.run_sync(self.tuner.traffic)
        facts = classify.facts(data)  # its kind, prompt characters, max_tokens: its route
        load = self.pool.load(model) + 1  # the model's requests at once, this one among them
        try:
            engine = await self.bounds.within(lambda: self.pool.acquire(model, facts, load),
                                              None)
        except (Unknown, NotReady, StartFailed, NoRoom, ShuttingDown, Busy) as exc:
            return await self._refused(model, exc)(scope, _never, send)
        reply: httpx.Response | None = None
        try:
            sent = anyio.current_time()
            opened = await self._open(request, engine, data, body, sent)
            if isinstance(opened, Response):  # the error to answer instead
                return await opened(scope, _never, send)
            reply = opened
            kept = {k: v for k, v in reply.headers.items()
                    if k.lower() in ("content-type", "cache-control", "x-request-id")}
            relay = self._relay(engine, reply, data, arrived, facts, sent, load)
            await StreamingResponse(relay, reply.status_code, kept)(scope, _never, send)
        finally:
            with anyio.CancelScope(shield=True):
                if reply is not None:
                    await reply.aclose()
                self.pool.release(engine)

    def _refused(self, model: str, exc: Exception) -> Response:
        """The answer to a request that got no engine."""
        if isinstance(exc, Unknown):
            return error(404, str(exc), "not_found_error")
        retry = {"Retry-After": str(RETRY_AFTER)}
        if isinstance(exc, ShuttingDown):
            self._count(model, "-", 503)
            return error(503, STOPPING, "server_error", retry)
        status = exc.status if isinstance(exc, NoRoom) else 503 if isinstance(
            exc, (NotReady, Busy)) else 502
        self._count(model, "-", status)
        return error(status, str(exc), "server_error", retry if status == 503 else None)

    async def _open(self, request: Request, engine: Engine, data: dict[str, Any], body: bytes,
                    sent: float) -> httpx.Response | Response:
        """Send the request to the engine: its reply's headers, or the error response to
        answer instead (the engine failed, sent nothing within the first-byte bound, or the
        gateway is stopping)."""
        client = self.client
        assert client is not None and engine.handle is not None
        running = engine.handle.running
        if running.launch.model and data.get("model") != running.launch.model:
            body = json.dumps({**data, "model": running.launch.model}).encode()  # its name
        url = f"{running.endpoint.api.rstrip('/')}/{request.path_params['rest']}"
        headers = {"content-type": "application/json", **running.endpoint.headers()}
        upstream = client.build_request("POST", url, content=body, headers=headers,
                                        params=request.query_params)
        bound = self.bounds.timeouts.first_byte
        hung = f"sent no reply within the first-byte bound of {bound:g} s"
        failed = f"{engine.model}'s server failed; the next request starts it again"
        try:
            return await self.bounds.within(lambda: client.send(upstream, stream=True),
                                            sent + bound, hung)
        except httpx.HTTPError as exc:
            self._count(engine.model, engine.setting, 502)
            self.pool.say(f"{engine.model} ({engine.setting}): no reply: {http.why(exc)}")
            return error(502, failed, "server_error")
        except Hung:
            self.pool.fail(engine, hung)
            self._count(engine.model, engine.setting, 504)
            return error(504, f"{engine.model}'s server {hung}; it is restarted for the "
                               "next request", "server_error")
        except ShuttingDown:
            self._count(engine.model, engine.setting, 503)
            return error(503, STOPPING, "server_error", {"Retry-After": str(RETRY_AFTER)})

    async def _relay(self, engine: Engine, reply: httpx.Response, data: dict[str, Any],
                     arrived: float, facts: classify.Facts, sent: float,
                     load: int) -> AsyncIterator[bytes]:
        """The engine's reply to the request `data`, chunk by chunk as it comes, read for
        metrics (and the kept traffic) on the way. A stream whose engine fails, hangs past a
        bound, or whose gateway stops ends with an error event and `data: [DONE]`."""
        adapter, stream = engine.resolved.backend, data.get("stream") is True
        watch = Watch(stream, adapter.decode_timing, adapter.reply_stats, self.pool.clock,
                      prompt=adapter.prompt_tokens, prefill=adapter.prefill_timing)
        seen = _Seen(arrived, sent, facts, load)
        chunks, bounds = reply.aiter_raw(), self.bounds.timeouts
        deadline, what = sent + bounds.first_byte, f"the first-byte bound of {bounds.first_byte:g}"
        observed = False
        try:
            while True:
                try:
                    chunk = await self.bounds.within(chunks.__anext__, deadline,
                                                     f"sent nothing within {what} s")
                except StopAsyncIteration:
                    break
                watch.feed(chunk)
                if watch.done and not observed:  # counted and kept before [DONE] goes out:
                    observed = True  # a client may close on it, and then the rest of this
                    self._observe(engine, watch, seen, reply.status_code, data)
                yield chunk  # generator never runs
                deadline = anyio.current_time() + bounds.chunk
                what = f"the bound between chunks of {bounds.chunk:g}"
        except (httpx.HTTPError, Hung, ShuttingDown) as exc:
            if observed:  # after [DONE]: the reply was whole
                return
            status, message = self._cut(engine, exc)
            self._count(engine.model, engine.setting, status)
            if stream:
                yield event(message, status)
            return
        if not observed:
            watch.finish()
            self._observe(engine, watch, seen, reply.status_code, data)

    def _cut(self, engine: Engine, exc: Exception) -> tuple[int, str]:
        """A stream cut short: its status and the words of its error event."""
        if isinstance(exc, ShuttingDown):
            return 503, f"{STOPPING}: this stream ends here"
        if isinstance(exc, Hung):
            self.pool.fail(engine, str(exc))
            return 504, f"{engine.model}'s server {exc}; it is restarted for the next request"
        assert isinstance(exc, httpx.HTTPError)
        return 502, (f"{engine.model}'s server failed mid-stream: {http.why(exc)}; the next "
                     "request starts it again")

    def _observe(self, engine: Engine, watch: Watch, seen: _Seen, status: int,
                 data: dict[str, Any]) -> None:
        m, labels = self.pool.metrics, (engine.model, engine.setting)
        arrived, kind = seen.arrived, seen.facts.kind
        self._count(engine.model, engine.setting, status)
        if status != 200:
            return
        self._learn(engine, watch, seen)
        self.keeper.keep(engine.model, self.pool.profiles[engine.model].gateway.keep_traffic,
                         data, kind, watch.prompt_tokens, watch.generated)  # (a worker writes)
        m.tokens.labels(*labels).inc(watch.generated)
        tps = None
        if watch.first_at is not None:
            m.ttft.labels(*labels).observe(max(watch.first_at - arrived, 0.0))
            spent = self.pool.clock() - watch.first_at
            tps = watch.engine_tps or ((watch.generated - 1) / spent if spent > 0 and
                                       watch.generated > 1 else None)
            if tps:
                m.decode.labels(*labels).observe(tps)
        if watch.stats is not None:
            m.drafted.labels(*labels).inc(watch.stats.drafted)
            m.accepted.labels(*labels).inc(watch.stats.accepted)

    def _learn(self, engine: Engine, watch: Watch, seen: _Seen) -> None:
        """What the request tells its model's Learned: its setting's prefill and decode times
        at its kind and load (the engine's own timings, else the gateway's clock)."""
        served = self.pool.plans.served.get(engine.model)
        if served is None or served.learned is None or not engine.slot.routed:
            return
        done = self.pool.clock()
        filled = watch.engine_prefill
        prompt = filled[0] if filled else watch.prompt_tokens
        prefill = filled[1] if filled else (watch.first_at - seen.sent
                                            if watch.first_at is not None else None)
        tokens = watch.generated
        decode = ((tokens - 1) / watch.engine_tps if watch.engine_tps else
                  done - watch.first_at if watch.first_at is not None else None)
        served.learned.add(learned.Served(engine.setting, seen.facts.kind, seen.load, prompt,
                                          prefill, tokens, decode), seen.facts.chars)

    def _count(self, model: str, setting: str, status: int) -> None:
        if model in self.pool.profiles:  # an unknown name never becomes a label
            self.pool.metrics.requests.labels(model, setting, str(status)).inc()

    def _denied(self, close: bool = False) -> Response:
        headers = {"WWW-Authenticate": "Bearer", **({"Connection": "close"} if close else {})}
        return error(401, "missing or wrong API key: send `Authorization: Bearer KEY` (the "
                     "gateway's key is in $SPECCTL_GATEWAY_API_KEY where it was started)",
                     "authentication_error", headers, code="invalid_api_key")


