"""The gateway's one error responder: every error it answers is JSON in OpenAI's shape,
`{"error": {"message", "type", "param", "code"}}` (the openai client shows `message`), or on
Anthropic's paths (/v1/messages...) in Anthropic's, `{"type": "error", "error": {"type",
"message"}}`, so that each API's client raises its own typed errors.

That covers the gateway's own refusals, Starlette's (an unknown path is a 404, a wrong method a
405 with `Allow`), any unexpected exception (a 500, one log line, and the gateway serves on),
and an engine's error answer: a 4xx, or a 5xx its adapter reads as a request it could not parse
(`Adapter.malformed`), is the request's fault and becomes a 400 that keeps the engine's message;
any other 5xx is the engine failing, a 502.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from specctl.orchestrator import sanitise
from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.gateway import apis, paths
from specctl.orchestrator.humanize import Say

ECHO = 100  # characters of a client's value quoted back in a message
ENGINE_TEXT = 1000  # characters of an engine's message kept
_HELD = 64 << 10  # bytes of an engine's error answer read to find its message
_OWN = "specctl.gateway_error"  # set in the scope once the gateway answers an error itself
KINDS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
         404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
         429: "rate_limit_error"}
# Anthropic's error types by status (any other 4xx is invalid_request_error, a 5xx api_error)
ANTHROPIC_KINDS = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                   413: "request_too_large", 429: "rate_limit_error"}


class GatewayError(JSONResponse):
    """An error the gateway answers itself (an engine's answer is rewritten; this is not)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[_OWN] = True
        await super().__call__(scope, receive, send)


def error(status: int, message: str, kind: str | None = None,
          headers: Mapping[str, str] | None = None, param: str | None = None,
          code: str | None = None, anthropic: bool = False) -> GatewayError:
    """An error answer in OpenAI's shape (`kind` its type, by default the status's), or in
    Anthropic's (its type the status's: `param` and `code` are OpenAI's alone)."""
    if anthropic:
        return GatewayError({"type": "error", "error": {
            "type": anthropic_kind(status), "message": message}}, status, headers)
    body = {"message": message, "type": kind or KINDS.get(status, "server_error"),
            "param": param, "code": code}
    return GatewayError({"error": body}, status_code=status, headers=headers)


def anthropic_kind(status: int) -> str:
    return ANTHROPIC_KINDS.get(status, "api_error" if status >= 500 else "invalid_request_error")


class Refused(Exception):
    """A request refused before it reaches an engine: `close` when its body is left unread
    (the connection closes after the answer)."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.close = close

    def response(self, anthropic: bool = False) -> GatewayError:
        headers = {"Connection": "close"} if self.close else None
        return error(self.status, self.message, headers=headers, param=self.param,
                     code=self.code, anthropic=anthropic)


def served() -> str:
    """What the gateway answers, for a 404."""
    forwarded = ", ".join(sorted(paths.declared()))
    return (f"the gateway forwards POST {forwarded} (those the model's server has), and "
            "answers GET /v1/models, /v1/models/MODEL, /health, /metrics")


def anthropic_at(scope: Scope) -> bool:
    """Is the request's path (normalised) one of Anthropic's, answered in its shape?"""
    return apis.anthropic_path(paths.canonical(str(scope.get("path", ""))))


def quote(value: object) -> str:
    """A client's value, quoted back at most ECHO characters long, control characters escaped."""
    return f"'{sanitise.line(value, ECHO)}'"


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's refusals (no such route, a wrong method) in the gateway's shape."""
    assert isinstance(exc, HTTPException)
    path = quote(request.scope.get("path", ""))
    anthropic = anthropic_at(request.scope)
    if exc.status_code == 404:  # the body, if any, is never read: the connection closes
        close = {"Connection": "close"} if request.method not in ("GET", "HEAD") else None
        return error(404, f"no such path: {path}; {served()}", headers=close,
                     code="unknown_path", anthropic=anthropic)
    if exc.status_code == 405:
        given = (exc.headers or {}).get("Allow", "")  # Starlette joins a set: any order
        allow = ", ".join(sorted(m.strip() for m in given.split(",") if m.strip()))
        return error(405, f"{quote(request.method)} is not allowed on {path}; use {allow}",
                     headers={"Allow": allow}, code="method_not_allowed", anthropic=anthropic)
    return error(exc.status_code, sanitise.line(exc.detail, ECHO), headers=exc.headers,
                 anthropic=anthropic)


class Catch:
    """ASGI middleware: an exception nothing else caught is one log line and a 500 JSON (or,
    once the reply has begun, the connection closed); the gateway serves on."""

    def __init__(self, app: ASGIApp, say: Say) -> None:
        self.app, self.say = app, say

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as exc:  # the request's failure, not the gateway's: it serves on
            leaf = _leaf(exc)
            self.say(f"error: {scope.get('method')} {sanitise.line(scope.get('path'), ECHO)}: "
                     f"{type(leaf).__name__}: {sanitise.line(leaf, 300)}")
            if not started:
                await error(500, "the gateway failed on this request (its log says why); "
                            "other requests are served", code="internal_error",
                            anthropic=anthropic_at(scope))(scope, receive, send)


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside an exception group (a task group's), else `exc`."""
    inner = getattr(exc, "exceptions", None)
    while isinstance(inner, tuple) and inner and isinstance(inner[0], BaseException):
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return exc


class EngineErrors:
    """The `send` of a relayed reply. An engine's error answer (status 400 or more) is held,
    read (up to 64 KiB) and answered in the gateway's shape: 400 with the engine's message when
    the request was at fault, 502 when the engine failed. The gateway's own errors, and replies
    below 400, pass as they are."""

    def __init__(self, scope: Scope, send: Send, adapter: Adapter | None, model: str,
                 anthropic: bool = False) -> None:
        self.scope, self.send, self.adapter, self.model = scope, send, adapter, model
        self.anthropic = anthropic  # the answer in Anthropic's shape
        self.held: Message | None = None
        self.body = bytearray()

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] >= 400 and \
                not self.scope.get(_OWN):
            self.held = message
            return
        if self.held is None or message["type"] != "http.response.body":
            return await self.send(message)
        if len(self.body) < _HELD:
            self.body += message.get("body", b"")[:_HELD - len(self.body)]
        if not message.get("more_body", False):
            await self.answer(self.held["status"])(self.scope, _nothing, self.send)

    def answer(self, status: int) -> GatewayError:
        said = sanitise.line(_message(bytes(self.body)), ENGINE_TEXT)
        shape = self.anthropic
        if status == 429:
            return error(429, f"{self.model}'s server is busy: {said}", code="engine_busy",
                         anthropic=shape)
        if status in (401, 403):  # the engine refused the gateway's own key
            return error(502, f"{self.model}'s server refused the gateway ({status}): {said}",
                         code="engine_failed", anthropic=shape)
        if status < 500 or status == 501 or (
                self.adapter is not None and self.adapter.malformed(status, said)):
            return error(400, said, code="engine_refused", anthropic=shape)
        return error(502, f"{self.model}'s server failed ({status}): {said}",
                     code="engine_failed", anthropic=shape)


def _message(body: bytes) -> str:
    """The message in an engine's error answer: OpenAI's `error.message`, or a string `error`,
    `message` or `detail` (the FastAPI and TGI shapes), else the text itself."""
    try:
        found: Any = json.loads(body)
    except (ValueError, RecursionError):
        return body.decode("utf-8", "replace").strip() or "(no message)"
    if isinstance(found, dict):
        inner = found.get("error")
        for value in ((inner.get("message") if isinstance(inner, dict) else inner),
                      found.get("message"), found.get("detail")):
            if isinstance(value, str) and value:
                return value
    return body.decode("utf-8", "replace").strip()


async def _nothing() -> Message:
    raise AssertionError("an error answer reads nothing")
