"""The gateway's HTTP face (Starlette; uvicorn serves it): `/v1/models` and `/v1/models/ID`,
every inference API an adapter declares (gateway/apis.py: below /v1/, and at the root such as
/infill) passed by POST to the server of the model the body names, `/metrics`, `/health`.

A reply is passed through as it comes, chunk by chunk (httpx streams it from the engine). A
client that goes away cancels the relay, which closes the engine's connection, and the engine
drops the request. An engine that dies mid-stream gives the client its API's error event
(gateway/ends.py); one that sends nothing within a bound (gateway/bounds.py), or is found hung
sooner (gateway/hung.py), gives it a 504 and is failed. Errors are in each API's shape
(Anthropic's on its paths). With keys set, every path but `/health` needs `Authorization:
Bearer KEY` (or `x-api-key: KEY`, as Anthropic's clients send it); keys are never logged and
never reach a label.
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.gateway import apis, errors, hung, intake, paths
from specctl.orchestrator.gateway.bounds import Bounds
from specctl.orchestrator.gateway.errors import error
from specctl.orchestrator.gateway.idle import IdleTuner
from specctl.orchestrator.gateway.intake import MAX_BODY as MAX_BODY
from specctl.orchestrator.gateway.keep import Keeper
from specctl.orchestrator.gateway.owned import Ledger
from specctl.orchestrator.gateway.pool import Pool
from specctl.orchestrator.gateway.relay import Relay


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


def authorized(request: Request, keys: Sequence[str]) -> bool:
    """A key of `keys` in `Authorization: Bearer KEY` (OpenAI's clients) or `x-api-key: KEY`
    (Anthropic's)."""
    if not keys:
        return True
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    given = [token.strip()] if scheme.lower() == "bearer" else []
    given += [request.headers["x-api-key"].strip()] if "x-api-key" in request.headers else []
    return any(hmac.compare_digest(t.encode(), k.encode()) for t in given for k in keys)


class Gateway:
    def __init__(self, pool: Pool, tuner: IdleTuner | None, keys: Sequence[str],
                 url: str = "", ledger: Ledger | None = None, bounds: Bounds | None = None,
                 keeper: Keeper | None = None, warm: bool = False) -> None:
        self.pool, self.tuner, self.keys, self.warm = pool, tuner, tuple(keys), warm
        self.keeper = keeper or Keeper(pool.plans.app.dirs, pool.say)  # the kept traffic
        self.url, self.ledger = url, ledger  # the state file: engines, routes for `status`
        self.bounds = bounds or Bounds()
        self.relay = Relay(pool, self.bounds, self.keeper, tuner)
        if self.bounds.hang is None:  # a hung engine known in seconds, through our client
            self.bounds.hang = hung.HangCheck(hung.prober(lambda: self.relay.client))
        self._backends = paths.Backends(pool)

    def app(self) -> Starlette:
        app = Starlette(routes=[
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/models/{model}", self.model, methods=["GET"]),
            Route("/gateway/status", self.status, methods=["GET"]),
            Route("/v1/{rest:path}", self.forward, methods=["POST"]),
            *(Route(p, self.forward, methods=["POST"]) for p in paths.at_root()),
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
            self.relay.client = client
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
        return JSONResponse({"object": "list", "data": [
            self._model(name) for name in sorted(self.pool.profiles)]})

    async def model(self, request: Request) -> Response:
        """One model as OpenAI's API answers it (`models.retrieve`); 404 for one not served."""
        if not authorized(request, self.keys):
            return self._denied()
        name = request.path_params["model"]
        if name not in self.pool.profiles:
            names = ", ".join(sorted(self.pool.profiles)) or "none"
            return error(404, f"model {errors.quote(name)} is not served here; /v1/models "
                         f"lists {names}", param="model", code="model_not_found")
        return JSONResponse(self._model(name))

    def _model(self, name: str) -> dict[str, Any]:
        up = [e for s, e in self.pool.current.items() if s.model == name]
        route = self.pool.plans.served[name].routing.route
        setting = route.describe() if route else up[0].setting if up else None
        return {"id": name, "object": "model", "created": 0, "owned_by": "specctl",
                "description": self.pool.profiles[name].description,
                "running": any(e.usable for e in up), "setting": setting}

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
        """A POST to an API path: keys, then the path (404 unless an adapter declares it,
        before the body is read), the body (intake), the model, its adapter's paths; then the
        relay to the engine, of the canonical path and body, whose error answers are rewritten
        (each in its API's shape)."""
        pending = intake.has_body(request.headers)
        path = paths.canonical(request.scope["path"])
        api = apis.of(path)
        anthropic = apis.anthropic_path(path)
        if not authorized(request, self.keys):
            return self._denied(close=pending, anthropic=anthropic)
        if path not in paths.declared():
            return self._no_path(request, close=pending, anthropic=anthropic)
        try:
            checked = await intake.accept(request, api.path, self.pool.profiles)
        except errors.Refused as exc:
            return exc.response(anthropic)
        data, model = checked.data, checked.model
        adapter = await self._backends.of(model)
        if adapter is not None and api.path not in adapter.api_paths:
            return self._no_path(request, adapter=adapter, model=model, anthropic=anthropic)
        return Guarded(lambda scope, send: self.relay.serve(
            api, model, data, checked.raw, scope,
            errors.EngineErrors(scope, send, adapter, model, anthropic)))

    def _no_path(self, request: Request, adapter: Adapter | None = None, model: str = "",
                 close: bool = False, anthropic: bool = False) -> Response:
        said = errors.quote(request.scope["path"])
        if adapter is None:
            message = f"no such path: {said}; {errors.served()}"
        else:
            has = ", ".join(sorted(adapter.api_paths))
            message = f"{model}'s server has no {said}; it serves {has}"
        return error(404, message, headers={"Connection": "close"} if close else None,
                     code="unknown_path", anthropic=anthropic)

    def _denied(self, close: bool = False, anthropic: bool = False) -> Response:
        headers = {"WWW-Authenticate": "Bearer", **({"Connection": "close"} if close else {})}
        return error(401, "missing or wrong API key: send `Authorization: Bearer KEY` or "
                     "`x-api-key: KEY` (the gateway's key is in $SPECCTL_GATEWAY_API_KEY where "
                     "it was started)", "authentication_error", headers,
                     code="invalid_api_key", anthropic=anthropic)


