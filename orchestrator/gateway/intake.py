"""A request's body, read and checked before anything is forwarded: the one JSON reader of the
gateway.

- Size: a `Content-Length` past MAX_BODY is a 413 before a byte is read (so a client that sent
  `Expect: 100-continue` is never invited: uvicorn sends `100 Continue` only when the body is
  first read); a chunked body is cut at MAX_BODY while it is read; a body that stops coming
  for BODY_IDLE seconds is a 408 (a slow client holds no connection for ever). Each time the
  connection closes after the answer (the rest of the body is never read).
- Text: UTF-8 only; a byte-order mark or another encoding is a 400.
- Nesting: at most MAX_DEPTH levels, counted on the bytes before parsing (without recursion), so
  no parser ever recurses deeper.
- Values: finite numbers only (`1e999`, `NaN`, `Infinity` are 400s); a key twice in one object is
  a 400 (parsers differ on which one wins); a lone surrogate is a 400.
- Then the model (the body's `model`; a fill-in-the-middle body without one goes to the one
  model of a gateway that serves one) and the fields of the path's API (`schema.check`).

A body that passes is sent to the engine as received: with every way two parsers could read it
differently refused above, the engine reads what the gateway checked. A body above IN_THREAD
bytes is read in a thread, so the event loop serves other requests meanwhile (numpy counts the
nesting and the parser calls back into Python: neither holds the interpreter long).
"""

from __future__ import annotations

import codecs
import functools
import json
import math
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np
from starlette.datastructures import Headers
from starlette.requests import Request

from specctl.orchestrator import sanitise
from specctl.orchestrator.gateway import apis, schema
from specctl.orchestrator.gateway.errors import ECHO, Refused, quote

MAX_BODY = 32 << 20  # a request body past this is refused (413)
MAX_DEPTH = 64  # arrays and objects inside each other
IN_THREAD = 64 << 10  # a body past this is parsed off the event loop
PARSERS = 2  # bodies parsed off the event loop at once (the others wait their turn)
BODY_IDLE = 30.0  # seconds a body may stop coming before the request is refused (408)
_BOMS = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_STEP = np.zeros(256, np.int8)
_STEP[list(b"[{")] = 1
_STEP[list(b"]}")] = -1
_SLICE = 1 << 20
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")  # in the JSON text
_SURROGATE = re.compile("[\ud800-\udfff]")  # in a parsed string


@dataclass(frozen=True)
class Body:
    model: str
    data: dict[str, Any]
    raw: bytes  # the body as received: what the engine is sent


def has_body(headers: Headers) -> bool:
    """Whether the request carries a body (answered before it is read, the connection closes)."""
    return "transfer-encoding" in headers or headers.get("content-length", "0") != "0"


async def accept(request: Request, path: str, served: Collection[str]) -> Body:
    """The request's body, read and checked for the API at `path` (gateway/apis.py) and a model
    among `served` (else a 404); Refused says why not."""
    body = await read(request)
    if len(body) > IN_THREAD:
        return await anyio.to_thread.run_sync(parse, body, path, served, limiter=_parsers())
    return parse(body, path, served)


@functools.cache
def _parsers() -> anyio.CapacityLimiter:
    """Threads parsing big bodies at once: what a 32 MiB body parses into can take 850 MiB."""
    return anyio.CapacityLimiter(PARSERS)


async def read(request: Request) -> bytes:
    """The body, no further than MAX_BODY: a declared length past it is refused unread."""
    declared = request.headers.get("content-length")
    if declared is not None and not (declared.isascii() and declared.isdigit()):
        raise Refused(400, "Content-Length is not a number", code="invalid_length", close=True)
    if declared is not None and int(declared) > MAX_BODY:
        raise _too_big()
    chunks: list[bytes] = []
    size = 0
    stream = request.stream()
    while True:
        with anyio.move_on_after(BODY_IDLE) as waiting:
            chunk = await anext(stream, None)
        if waiting.cancelled_caught:
            raise Refused(408, f"the body stopped coming for {BODY_IDLE:.0f} s",
                          code="body_timeout", close=True)
        if chunk is None:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_BODY:
            raise _too_big()
        chunks.append(chunk)


def _too_big() -> Refused:
    return Refused(413, f"request body over {MAX_BODY >> 20} MiB", code="body_too_large",
                   close=True)


def parse(body: bytes, path: str, served: Collection[str]) -> Body:
    """Blocking: the body read as JSON within the rules above, its model one of `served`, its
    fields checked for the API at `path`."""
    if body.startswith(_BOMS):
        raise Refused(400, "the body starts with a byte-order mark: send JSON as UTF-8 without "
                      "one", code="invalid_encoding")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(400, "the body is not UTF-8: send JSON as UTF-8",
                      code="invalid_encoding") from None
    if deepest(body) > MAX_DEPTH:
        raise Refused(400, f"the body nests arrays and objects deeper than {MAX_DEPTH} levels",
                      code="too_deep")
    try:
        data = json.loads(text, parse_constant=_constant, parse_float=_finite,
                          object_pairs_hook=_once)
    except ValueError as exc:  # JSONDecodeError, an integer of thousands of digits
        raise Refused(400, f"the body is not JSON: {sanitise.line(exc, 200)}",
                      code="invalid_json") from None
    if not isinstance(data, dict):
        raise Refused(400, "the body is not a JSON object", code="invalid_json")
    if _ESCAPED_SURROGATE.search(body) and _lone_surrogate(data):
        raise Refused(400, "the body has a lone surrogate (\\ud800-\\udfff) in a string",
                      code="invalid_json")
    api = apis.of(path)
    model = _model(data, api, served)
    if model not in served:
        names = ", ".join(sorted(served)) or "none"
        raise Refused(404, f"model {quote(model)} is not served here; /v1/models lists {names}",
                      param="model", code="model_not_found")
    schema.check(api.format, data)
    return Body(model, data, body)


def _model(data: dict[str, Any], api: apis.Api, served: Collection[str]) -> str:
    """The model the body names; a body that leaves it out goes to the one model served,
    where there is one (as llama-server takes it: how `up` serves through the router)."""
    if data.get("model") is not None:
        return schema.model_of(data)
    if len(served) == 1:
        return next(iter(served))
    names = ", ".join(sorted(served)) or "none"
    raise Refused(400, f"name the model in the body's \"model\" field: {api.path} without one "
                  f"goes to the gateway's one model, and this one serves {len(served)} "
                  f"({names})", param="model", code="missing_model")


def deepest(body: bytes) -> int:
    """How deep arrays and objects nest in `body`, brackets inside strings not counted: JSON's
    own lexing (a `"` not escaped by an odd run of backslashes opens or closes a string), on
    bytes (no UTF-8 sequence holds an ASCII byte), in slices with numpy: linear, without
    recursion, and mostly off the interpreter's lock."""
    data = np.frombuffer(body, np.uint8)
    deepest_seen = depth = run = 0
    inside = False
    for start in range(0, len(data), _SLICE):
        part = data[start:start + _SLICE]
        opening = part == ord('"')
        ending = np.zeros(len(part), np.int32)  # backslashes in a row through each byte
        slash = part == ord("\\")
        if run or slash.any():
            at = np.arange(len(part), dtype=np.int32)
            last_plain = np.maximum.accumulate(np.where(slash, -1, at))
            ending = at - last_plain + np.where(last_plain < 0, run, 0)
            opening[1:] &= ending[:-1] % 2 == 0
            opening[0] &= run % 2 == 0
        quotes = np.cumsum(opening, dtype=np.int32) + inside
        levels = np.cumsum(np.where(quotes % 2 == 0, _STEP[part], 0), dtype=np.int32) + depth
        deepest_seen = max(deepest_seen, int(levels.max()))
        depth, inside, run = int(levels[-1]), bool(quotes[-1] % 2), int(ending[-1])
    return deepest_seen


def _lone_surrogate(data: Any) -> bool:
    """Whether a string in `data` holds a surrogate the parser could not pair (an escaped pair
    became one character; UTF-8 text holds none), walked without recursion."""
    todo = [data]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            todo.extend(item)
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return False


def _constant(name: str) -> Any:
    raise Refused(400, f"the body has {name}: numbers must be finite", code="invalid_number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise Refused(400, f"the body has {sanitise.line(text, ECHO)}: numbers must be finite",
                      code="invalid_number")
    return value


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) == len(pairs):
        return found
    seen: set[str] = set()
    for key, _value in pairs:
        if key in seen:
            raise Refused(400, f"the body has the key {quote(key)} twice in one object",
                          code="duplicate_key")
        seen.add(key)
    raise AssertionError("unreachable")
