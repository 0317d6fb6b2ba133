"""The relay of one request to its engine and of the reply back, in the request's API
(gateway/apis.py): its route read from its body (measure/route/classify.facts, in its API's
format), an engine acquired (started if need be), the canonical path and body sent, the reply
passed through chunk by chunk and read on the way (gateway/watch.py) for metrics and the kept
traffic.

What ends a request early: no engine (404, 502, 503 with Retry-After, 507), an engine that fails
(502), sends nothing within a bound or is found hung (504: gateway/bounds.py, gateway/hung.py),
or a gateway that stops (503); the answer is an error in the API's shape, or, once a stream has
begun, the API's own error events (gateway/ends.py). A hung engine is failed at once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from starlette.responses import Response, StreamingResponse
from starlette.types import Message, Scope, Send

from specctl.orchestrator import http
from specctl.orchestrator.gateway import ends
from specctl.orchestrator.gateway.apis import Api
from specctl.orchestrator.gateway.bounds import Bounds, Hung, ShuttingDown
from specctl.orchestrator.gateway.engines import Engine
from specctl.orchestrator.gateway.errors import error
from specctl.orchestrator.gateway.idle import IdleTuner
from specctl.orchestrator.gateway.keep import Keeper
from specctl.orchestrator.gateway.line import Busy
from specctl.orchestrator.gateway.pool import NotReady, Pool, StartFailed, Unknown
from specctl.orchestrator.gateway.room import NoRoom
from specctl.orchestrator.gateway.watch import Watch
from specctl.orchestrator.measure.route import classify, learned
from specctl.orchestrator.measure.route.classify import Facts

RETRY_AFTER = 10
STOPPING = "the gateway is shutting down; try again shortly"


async def _never() -> Message:
    """The `receive` of the responses sent here: the gateway's `Guarded` alone reads the
    client."""
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class _Seen:
    """A request as its relay saw it start: arrival, when it was sent, its facts, its load."""

    arrived: float
    sent: float
    facts: Facts
    load: int


class Relay:
    def __init__(self, pool: Pool, bounds: Bounds, keeper: Keeper,
                 tuner: IdleTuner | None) -> None:
        self.pool, self.bounds, self.keeper, self.tuner = pool, bounds, keeper, tuner
        self.client: httpx.AsyncClient | None = None  # the gateway's, while it serves

    async def serve(self, api: Api, model: str, data: dict[str, Any], body: bytes,
                    scope: Scope, send: Send) -> None:
        arrived = self.pool.clock()
        if self.tuner is not None:
            await anyio.to_thread.run_sync(self.tuner.traffic)
        facts = classify.facts(data, api.format)  # kind, prompt characters, max_tokens: route
        # the model's requests at once, this one among them, or the most of a moment ago
        load = self.pool.recent.load(model, self.pool.load(model) + 1)
        try:
            engine = await self.bounds.within(lambda: self.pool.acquire(model, facts, load),
                                              None)
        except (Unknown, NotReady, StartFailed, NoRoom, ShuttingDown, Busy) as exc:
            return await self._refused(api, model, exc)(scope, _never, send)
        reply: httpx.Response | None = None
        try:
            sent = anyio.current_time()
            opened = await self._open(api, engine, data, body, sent)
            if isinstance(opened, Response):  # the error to answer instead
                return await opened(scope, _never, send)
            reply = opened
            kept = {k: v for k, v in reply.headers.items()
                    if k.lower() in ("content-type", "cache-control", "x-request-id")}
            relay = self._relay(api, engine, reply, data, _Seen(arrived, sent, facts, load))
            await StreamingResponse(relay, reply.status_code, kept)(scope, _never, send)
        finally:
            with anyio.CancelScope(shield=True):
                if reply is not None:
                    await reply.aclose()
                self.pool.release(engine)

    def _refused(self, api: Api, model: str, exc: Exception) -> Response:
        """The answer to a request that got no engine."""
        if isinstance(exc, Unknown):
            return error(404, str(exc), "not_found_error", anthropic=api.anthropic)
        retry = {"Retry-After": str(RETRY_AFTER)}
        if isinstance(exc, ShuttingDown):
            self._count(model, "-", 503)
            return error(503, STOPPING, "server_error", retry, anthropic=api.anthropic)
        status = exc.status if isinstance(exc, NoRoom) else 503 if isinstance(
            exc, (NotReady, Busy)) else 502
        self._count(model, "-", status)
        return error(status, str(exc), "server_error", retry if status == 503 else None,
                     anthropic=api.anthropic)

    async def _open(self, api: Api, engine: Engine, data: dict[str, Any], body: bytes,
                    sent: float) -> httpx.Response | Response:
        """Send the request to the engine: its reply's headers, or the error response to
        answer instead (the engine failed, sent nothing within the first-byte bound or was
        found hung, or the gateway is stopping)."""
        client = self.client
        assert client is not None and engine.handle is not None
        running = engine.handle.running
        if running.launch.model and data.get("model") != running.launch.model:
            body = json.dumps({**data, "model": running.launch.model}).encode()  # its name
        headers = {"content-type": "application/json", **running.endpoint.headers()}
        upstream = client.build_request("POST", f"{running.endpoint.root}{api.path}",
                                        content=body, headers=headers)
        bound = self.bounds.timeouts.first_byte
        hung = f"sent no reply within the first-byte bound of {bound:g} s"
        failed = f"{engine.model}'s server failed; the next request starts it again"
        shape = api.anthropic
        try:
            return await self.bounds.within(lambda: client.send(upstream, stream=True),
                                            sent + bound, hung, engine)
        except httpx.HTTPError as exc:
            self._count(engine.model, engine.setting, 502)
            self.pool.say(f"{engine.model} ({engine.setting}): no reply: {http.why(exc)}")
            return error(502, failed, "server_error", anthropic=shape)
        except Hung as exc:
            self.pool.fail(engine, str(exc))
            self._count(engine.model, engine.setting, 504)
            return error(504, f"{engine.model}'s server {exc}; it is restarted for the next "
                         "request", "server_error", anthropic=shape)
        except ShuttingDown:
            self._count(engine.model, engine.setting, 503)
            return error(503, STOPPING, "server_error", {"Retry-After": str(RETRY_AFTER)},
                         anthropic=shape)

    async def _relay(self, api: Api, engine: Engine, reply: httpx.Response,
                     data: dict[str, Any], seen: _Seen) -> AsyncIterator[bytes]:
        """The engine's reply to the request `data`, chunk by chunk as it comes, read for
        metrics (and the kept traffic) on the way. A stream whose engine fails, hangs, or whose
        gateway stops ends with its API's error events."""
        adapter, stream = engine.resolved.backend, data.get("stream") is True
        watch = Watch(stream, adapter.decode_timing, adapter.reply_stats, self.pool.clock,
                      prompt=adapter.prompt_tokens, prefill=adapter.prefill_timing,
                      events=api.stream)
        chunks, bounds = reply.aiter_raw(), self.bounds.timeouts
        deadline = seen.sent + bounds.first_byte
        what = f"the first-byte bound of {bounds.first_byte:g}"
        observed = False
        try:
            while True:
                try:
                    chunk = await self.bounds.within(chunks.__anext__, deadline,
                                                     f"sent nothing within {what} s", engine)
                except StopAsyncIteration:
                    break
                watch.feed(chunk)
                if watch.done and not observed:  # counted and kept before the last event goes
                    observed = True  # out: a client may close on it, and then the rest of
                    self._observe(api, engine, watch, seen, reply.status_code, data)
                yield chunk  # this generator never runs
                deadline = anyio.current_time() + bounds.chunk
                what = f"the bound between chunks of {bounds.chunk:g}"
        except (httpx.HTTPError, Hung, ShuttingDown) as exc:
            if observed:  # after its last event: the reply was whole
                return
            status, message = self._cut(engine, exc)
            self._count(engine.model, engine.setting, status)
            if stream:
                yield ends.event(api.stream, message, status, watch.reply_id, watch.seen)
            return
        if not observed:
            watch.finish()
            self._observe(api, engine, watch, seen, reply.status_code, data)

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

    def _observe(self, api: Api, engine: Engine, watch: Watch, seen: _Seen, status: int,
                 data: dict[str, Any]) -> None:
        """A reply that went whole: counted; where it generated (200), its tokens, timing and
        drafts in the metrics, its times in the model's Learned, and the request kept."""
        m, labels = self.pool.metrics, (engine.model, engine.setting)
        self._count(engine.model, engine.setting, status)
        if status != 200 or not api.generates:
            return
        arrived, kind = seen.arrived, seen.facts.kind
        self._learn(engine, watch, seen)
        self.keeper.keep(engine.model, self.pool.profiles[engine.model].gateway.keep_traffic,
                         data, kind, watch.prompt_tokens, watch.generated,
                         api.format)  # (a worker writes)
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
