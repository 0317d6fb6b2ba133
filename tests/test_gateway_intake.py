"""What a hostile client can send the gateway before anything reaches an engine: paths, bodies,
fields, methods, sizes and keys. In process (Starlette's TestClient, and the ASGI app called with
a scope written by hand where a client library would tidy the request up), and against the
gateway served by a real uvicorn in a subprocess where the transport matters (`Expect:
100-continue`, a body parsed while `/health` is asked). No engine runs: the one model served
here has no file. The same checks with a real llama-server behind the gateway are in
tests/test_gateway_hostile.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
from starlette.testclient import TestClient
from starlette.types import Message

from specctl.adapters.llamacpp import LlamaCpp
from specctl.orchestrator.app import App, Resolved, Routable
from specctl.orchestrator.config import profiles
from specctl.orchestrator.gateway import intake, paths, schema
from specctl.orchestrator.gateway.asgi import Gateway
from specctl.orchestrator.gateway.metrics import Metrics
from specctl.orchestrator.gateway.owned import Engines
from specctl.orchestrator.gateway.plans import Plans
from specctl.orchestrator.gateway.pool import Pool, PoolSettings
from specctl.orchestrator.runtime.servers import free_port
from tests import plans as plan_values

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def said() -> list[str]:
    return []


@pytest.fixture
def gateway(said: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Gateway:
    """A gateway serving one model, "m", whose file does not exist: no server ever starts."""
    monkeypatch.setenv("SPECCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SPECCTL_CONFIG_DIR", str(tmp_path / "config"))
    profile = profiles.parse(f'target = "{tmp_path}/none.gguf"\n', "m", "test")
    plan = plan_values.plan(profile="m", target=plan_values.target(path=tmp_path / "none.gguf"))
    backend = LlamaCpp()
    served = {"m": Resolved(profile, plan, backend.assumed(), backend)}
    plans = Plans(App.from_env(), {"m": profile}, {"m": Routable(served["m"])}, None)
    pool = Pool(plans, PoolSettings(), Metrics(), said.append, Engines(None, 60, 3))
    return Gateway(pool, None, ())


@pytest.fixture
def client(gateway: Gateway, said: list[str]) -> Iterator[TestClient]:
    with TestClient(gateway.app(), raise_server_exceptions=False) as c:
        said.clear()  # what the gateway said as it started (the routes): not the requests'
        yield c


def problem(reply: Any) -> dict[str, Any]:
    """The OpenAI-shaped error of a reply (an httpx response, or TestClient's): that it is one."""
    assert reply.headers["content-type"] == "application/json", reply.text
    found: dict[str, Any] = reply.json()["error"]
    assert set(found) == {"message", "type", "param", "code"}, found
    return found


# -- paths ---------------------------------------------------------------------------------------
# (raw path, forwarded as): None is a 404 at the gateway; a path is what the engine is sent
TRICKS = [
    ("/v1/%2e%2e/tokenize", None), ("/v1/%2E%2E/tokenize", None),
    ("/v1/%2e%2e/completion", None), ("/v1/%2e%2e/slots/0?action=erase", None),
    ("/v1/chat/%2e%2e/%2e%2e/tokenize", None), ("/v1/%2e%2e%2ftokenize", None),
    ("/v1/chat%2fcompletions", "/v1/chat/completions"),  # decoded, it is the path
    ("/v1/chat/%2e/completions", "/v1/chat/completions"),  # a `.` segment resolved
    ("/v1/tokenize/%2e%2e/completions", "/v1/completions"),
    ("/v1/..;/tokenize", None), ("/v1/chat/completions;x=1", None),
    ("/v1/chat/completions;", None), ("/v1/chat//completions", None),
    ("//v1/chat/completions", None), ("/v1/chat/completions/", None),
    ("/V1/Chat/Completions", None), ("/v1/Chat/Completions", None),
    ("/v1/CHAT/COMPLETIONS", None), ("/v1\\chat\\completions", None),
    ("/v1/..%5ctokenize", None), ("/v1/%252e%252e/tokenize", None),
    ("/v1/chat%252fcompletions", None), ("/v1/chat/completions%00", None),
    ("/v1/%00/../chat/completions", "/v1/chat/completions"),
    ("/v1/tokenize", None), ("/v1/completion", None), ("/v1/slots/0", None),
    ("/v1/props", None), ("/v1/models/../tokenize", None), ("/v1/", None), ("/v1", None),
    ("/v1/../tokenize", None), ("/v1/./../completion", None), ("/v1/a/../../x", None),
    ("/v1/chat/completions/input_tokens", None), ("/v1/responses", "/v1/responses"),
    ("/v1/messages/%2e%2e/%2e%2e/props", None), ("/infill/", None), ("/%2e/infill", None),
    ("/v1/../infill", "/infill"), ("/v1/messages/batches", None), ("/Infill", None),
    ("/v1/infill", None), ("/completion", None),
]


@pytest.mark.parametrize(("raw", "forwarded"), TRICKS)
def test_only_declared_paths_pass_however_encoded(gateway: Gateway, raw: str,
                                                  forwarded: str | None) -> None:
    """Every trick on the path is a 404 JSON before the body is read (the body here is not
    even JSON); a path that decodes and normalises to a declared one goes on. The app is
    called with the path as a server hands it over (decoded once), since a client library
    would tidy some of these up before sending."""
    status, headers, body, reads = call(gateway, "POST", raw, b"{not json")
    found = json.loads(body)["error"]
    assert headers["content-type"] == "application/json"
    if raw.startswith("/v1/messages/b"):  # Anthropic's path: its shape, its type
        assert status == 404 and found["type"] == "not_found_error", (raw, status, found)
        assert "no such path" in found["message"] and reads == 0
    elif forwarded is None:
        assert status == 404 and found["code"] == "unknown_path", (raw, status, found)
        assert "no such path" in found["message"] and reads == 0
    else:
        assert status == 400 and found["code"] == "invalid_json", (raw, status, found)
        assert paths.canonical(unquote(raw.split("?")[0])) == forwarded


@pytest.mark.parametrize("raw", ["/v1/%2e%2e/tokenize", "/v1/chat/completions/",
                                 "/V1/Chat/Completions", "/v1/%252e%252e/tokenize"])
def test_through_a_client_library_too(client: TestClient, raw: str) -> None:
    reply = client.post(raw, json=CHAT)
    assert reply.status_code == 404 and problem(reply)["code"] == "unknown_path"


def test_canonical_paths() -> None:
    assert paths.canonical("/v1/chat/completions") == "/v1/chat/completions"
    assert paths.canonical("/v1/a/./b/../completions") == "/v1/a/completions"
    for outside in ("/v1/..", "/v1/../v1", "/tokenize", "/v2/chat", "/v1", "/", "/v1/../.."):
        assert paths.canonical(outside) not in paths.declared(), outside
    assert paths.canonical("/..") is None and paths.canonical("/v1/../..") is None
    assert paths.canonical("/v1/../v1/completions") == "/v1/completions"  # resolved, matched
    assert paths.declared() >= {"/v1/chat/completions", "/v1/completions", "/v1/messages",
                                "/v1/responses", "/infill"}
    assert not {"/tokenize", "/completion", "/v1/tokenize"} & paths.declared()
    assert paths.at_root() == ["/infill"]


def test_each_backend_declares_its_api_paths() -> None:
    """Each path from the server's root, without dot or empty segments; every backend serves
    the two completions, and each path the gateway knows how to read (gateway/apis.py)."""
    from specctl.orchestrator.contract import registry
    from specctl.orchestrator.gateway import apis

    for name, cls in registry.adapter_classes().items():
        assert {"/v1/chat/completions", "/v1/completions"} <= cls.api_paths, name
        for path in cls.api_paths:
            assert path.startswith("/") and paths.canonical(path) == path, (name, path)
            assert "" not in path.split("/")[1:] and path in apis.KNOWN, (name, path)
    llama = registry.adapter_classes()["llamacpp"].api_paths
    assert {"/v1/messages", "/v1/messages/count_tokens", "/v1/responses",
            "/v1/responses/input_tokens", "/infill"} <= llama
    assert "/v1/embeddings" not in llama  # its server is not started for them


# -- bodies --------------------------------------------------------------------------------------
def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


BAD_BODIES = [
    ("utf16-bom", json.dumps(CHAT).encode("utf-16"), "invalid_encoding"),
    ("utf16-le", json.dumps(CHAT).encode("utf-16-le"), "invalid_json"),
    ("utf8-bom", b"\xef\xbb\xbf" + json.dumps(CHAT).encode(), "invalid_encoding"),
    ("latin-1", json.dumps({**CHAT, "x": "caf\u00e9"}, ensure_ascii=False).encode("latin-1"),
     "invalid_encoding"),
    ("deep-100000", nested(100_000).encode(), "too_deep"),
    ("deep-5000-inside", json.dumps({**CHAT, "x": 0}).replace("0}", nested(5000) + "}").encode(),
     "too_deep"),
    ("deep-objects", ('{"a":' * 3000 + "1" + "}" * 3000).encode(), "too_deep"),
    ("deep-unclosed", b"[" * 200_000, "too_deep"),
    ("1e999", json.dumps({**CHAT, "temperature": 0}).replace(": 0", ": 1e999").encode(),
     "invalid_number"),
    ("-1e999", json.dumps({**CHAT, "temperature": 0}).replace(": 0", ": -1e999").encode(),
     "invalid_number"),
    ("NaN", json.dumps({**CHAT, "temperature": float("nan")}).encode(), "invalid_number"),
    ("Infinity", json.dumps({**CHAT, "top_p": float("inf")}).encode(), "invalid_number"),
    ("-Infinity", json.dumps({**CHAT, "x": float("-inf")}).encode(), "invalid_number"),
    ("duplicate-model", b'{"model": "m", "model": "other", "messages": []}', "duplicate_key"),
    ("duplicate-inner", b'{"model": "m", "messages": [{"role": "user", "role": "system", '
     b'"content": "hi"}]}', "duplicate_key"),
    ("lone-surrogate", b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}',
     "invalid_json"),
    ("huge-integer", json.dumps({**CHAT, "seed": 0}).replace(": 0", ": " + "9" * 5000).encode(),
     "invalid_json"),
    ("not-an-object", b"[1, 2]", "invalid_json"),
    ("truncated", json.dumps(CHAT).encode()[:-3], "invalid_json"),
    ("nul-between", json.dumps(CHAT).replace(", ", ",\x00").encode(), "invalid_json"),
    ("empty", b"", "invalid_json"),
]


@pytest.mark.parametrize(("name", "body", "code"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_hostile_json_is_a_400_and_the_gateway_serves_on(client: TestClient, said: list[str],
                                                         name: str, body: bytes,
                                                         code: str) -> None:
    reply = client.post("/v1/chat/completions", content=body)
    assert reply.status_code == 400, (name, reply.status_code, reply.text[:300])
    found = problem(reply)
    assert found["code"] == code and found["type"] == "invalid_request_error", found
    assert len(reply.content) < 1024  # nothing of the body echoed back at length
    assert client.get("/health").json() == {"status": "ok"}
    assert said == []  # a refusal, not a failure: nothing logged


def test_what_is_accepted() -> None:
    """Brackets inside strings do not nest; escaped quotes do not end a string; a surrogate pair
    is one character; 64 levels pass."""
    served = ("m",)
    text = "[" * 5000 + '\\"' + "{" * 500
    body = json.dumps({**CHAT, "messages": [{"role": "user", "content": text}]}).encode()
    assert intake.parse(body, "/v1/chat/completions", served).data["messages"][0][
        "content"] == text
    emoji = b'{"model": "m", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}'
    assert intake.parse(emoji, "/v1/chat/completions", served).data["messages"][0][
        "content"] == "\U0001f600"
    deep = json.dumps({**CHAT, "x": 0}).replace("0}", nested(intake.MAX_DEPTH - 1) + "}")
    assert intake.deepest(deep.encode()) == intake.MAX_DEPTH
    assert intake.parse(deep.encode(), "/v1/chat/completions", served).raw == deep.encode()


@pytest.mark.parametrize("body", [b'["\\\\"[[]]', b'{"a": "\\\\\\"[[["}', b'"\\\\\\\\"[{}]'])
def test_nesting_counts_what_json_reads(body: bytes) -> None:
    """Backslash runs of either parity before a quote, across the numpy slices too."""
    expect = {b'["\\\\"[[]]': 3, b'{"a": "\\\\\\"[[["}': 1, b'"\\\\\\\\"[{}]': 2}[body]
    assert intake.deepest(body) == expect
    old, intake._SLICE = intake._SLICE, 2
    try:
        assert intake.deepest(body) == expect
    finally:
        intake._SLICE = old


# -- sizes ---------------------------------------------------------------------------------------
def call(gateway: Gateway, method: str, raw_path: str, body: bytes,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes, int]:
    """The gateway's app called with a scope as a server would build it for this request line
    (the path decoded once, nothing normalised): status, headers, body, and how many times
    the app read the request's body."""
    import anyio

    reads = 0
    sent: list[dict[str, Any]] = []
    given = {"content-length": str(len(body)), **(headers or {})}
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": unquote(raw_path.split("?")[0]),
             "raw_path": raw_path.encode(), "query_string": b"", "root_path": "",
             "headers": [(k.lower().encode(), v.encode()) for k, v in given.items()],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2)}

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    anyio.run(gateway.app(), scope, receive, send)  # type: ignore[arg-type]
    start = next(m for m in sent if m["type"] == "http.response.start")
    out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, out, reads


def test_a_declared_length_past_the_limit_is_refused_unread(gateway: Gateway) -> None:
    status, headers, body, reads = call(gateway, "POST", "/v1/chat/completions", b"",
                                        {"content-length": str(10 << 30),
                                         "expect": "100-continue"})
    assert status == 413 and reads == 0
    assert headers["connection"] == "close"  # the rest of the body is never read
    assert json.loads(body)["error"]["code"] == "body_too_large"
    status, headers, _body, reads = call(gateway, "POST", "/v1/chat/completions", b"",
                                         {"content-length": "12x"})
    assert status == 400 and reads == 0 and headers["connection"] == "close"


def test_a_chunked_body_is_cut_at_the_limit(client: TestClient) -> None:
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        while sent < 2 * intake.MAX_BODY:
            sent += 1 << 20
            yield b" " * (1 << 20)

    reply = client.post("/v1/chat/completions", content=chunks())
    assert reply.status_code == 413 and problem(reply)["code"] == "body_too_large"
    assert reply.headers["connection"] == "close"


def test_a_body_that_stops_coming_is_refused(gateway: Gateway,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow client (slowloris) holds no connection for ever: once the body stops coming for
    BODY_IDLE seconds, the request is a 408 and the connection closes."""
    import anyio

    monkeypatch.setattr(intake, "BODY_IDLE", 0.2)
    sent: list[Message] = []
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions",
             "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
             "headers": [(b"content-length", b"100")]}
    reads = 0

    async def receive() -> Message:
        nonlocal reads
        reads += 1
        if reads == 1:
            return {"type": "http.request", "body": b'{"model": "m", ', "more_body": True}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    async def run() -> None:
        with anyio.fail_after(10):  # the old code waited for ever
            await gateway.app()(scope, receive, send)

    anyio.run(run)
    assert sent[0]["status"] == 408 and (b"connection", b"close") in sent[0]["headers"]
    assert json.loads(sent[1]["body"])["error"]["code"] == "body_timeout"


def test_big_bodies_are_parsed_two_at_a_time(gateway: Gateway,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """What a 32 MiB body parses into can take 850 MiB: six big bodies at once are parsed two
    at a time, off the event loop, and each is answered."""
    import anyio

    running, most = 0, 0
    lock = threading.Lock()
    real = intake.parse

    def parse(body: bytes, path: str, served: Any) -> intake.Body:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.3)
        with lock:
            running -= 1
        return real(body, path, served)

    monkeypatch.setattr(intake, "parse", parse)
    body = json.dumps({**CHAT, "model": "nope", "pad": "x" * intake.IN_THREAD}).encode()
    statuses: list[int] = []

    async def one() -> None:
        async def receive() -> Message:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions",
                 "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
                 "headers": [(b"content-length", str(len(body)).encode())]}
        await gateway.app()(scope, receive, send)

    async def all_of() -> None:
        async with anyio.create_task_group() as tasks:
            for _ in range(6):
                tasks.start_soon(one)

    anyio.run(all_of)
    assert statuses == [404] * 6 and most == intake.PARSERS == 2


# -- fields --------------------------------------------------------------------------------------
def msg(**fields: Any) -> dict[str, Any]:
    return {**CHAT, "messages": [{"role": "user", "content": "hi", **fields}]}


def without_role() -> dict[str, Any]:
    return {**CHAT, "messages": [{"content": "hi"}]}


FIELDS = [
    ("no-role", without_role(), "messages[0].role"),
    ("role-number", msg(role=5), "messages[0].role"),
    ("role-unknown", msg(role="wizard"), "messages[0].role"),
    ("role-list", msg(role=["user"]), "messages[0].role"),
    ("content-number", msg(content=5), "messages[0].content"),
    ("content-object", msg(content={"text": "hi"}), "messages[0].content"),
    ("part-string", msg(content=["hi"]), "messages[0].content[0]"),
    ("part-no-type", msg(content=[{"text": "hi"}]), "messages[0].content[0].type"),
    ("part-type-list", msg(content=[{"type": ["text"]}]), "messages[0].content[0].type"),
    ("part-unknown", msg(content=[{"type": "video", "video": {}}]),
     "messages[0].content[0].type"),
    ("text-number", msg(content=[{"type": "text", "text": 5}]), "messages[0].content[0].text"),
    ("image-number", msg(content=[{"type": "image_url", "image_url": 5}]),
     "messages[0].content[0].image_url"),
    ("image-url-number", msg(content=[{"type": "image_url", "image_url": {"url": 5}}]),
     "messages[0].content[0].image_url.url"),
    ("audio-no-format", msg(content=[{"type": "input_audio", "input_audio": {"data": "x"}}]),
     "messages[0].content[0].input_audio.format"),
    ("name-number", msg(name=5), "messages[0].name"),
    ("tool-calls-number", msg(tool_calls=5), "messages[0].tool_calls"),
    ("messages-empty", {**CHAT, "messages": []}, "messages"),
    ("messages-string", {**CHAT, "messages": "hi"}, "messages"),
    ("messages-missing", {"model": "m"}, "messages"),
    ("message-number", {**CHAT, "messages": [5]}, "messages[0]"),
    ("model-number", {**CHAT, "model": 5}, "model"),
    ("model-list", {**CHAT, "model": ["m"]}, "model"),
    ("model-empty", {**CHAT, "model": ""}, "model"),
    ("model-long", {**CHAT, "model": "m" * (schema.MAX_MODEL + 1)}, "model"),
    ("stream-string", {**CHAT, "stream": "yes"}, "stream"),
    ("stream-number", {**CHAT, "stream": 1}, "stream"),
    ("max-tokens-string", {**CHAT, "max_tokens": "2"}, "max_tokens"),
    ("max-tokens-float", {**CHAT, "max_tokens": 2.5}, "max_tokens"),
    ("max-tokens-bool", {**CHAT, "max_tokens": True}, "max_tokens"),
    ("n-string", {**CHAT, "n": "1"}, "n"),
    ("temperature-string", {**CHAT, "temperature": "hot"}, "temperature"),
    ("temperature-bool", {**CHAT, "temperature": False}, "temperature"),
    ("tools-number", {**CHAT, "tools": 5}, "tools"),
]


@pytest.mark.parametrize(("name", "body", "param"), FIELDS, ids=[f[0] for f in FIELDS])
def test_a_malformed_request_is_a_400_naming_the_field(client: TestClient, name: str,
                                                       body: dict[str, Any], param: str) -> None:
    reply = client.post("/v1/chat/completions", json=body)
    assert reply.status_code == 400, (name, reply.text)
    found = problem(reply)
    assert found["param"] == param and found["type"] == "invalid_request_error", found
    assert len(reply.content) < 1024


def test_what_the_fields_allow() -> None:
    """Nulls, every known part, an assistant turn without content: each passes the checks (to
    the model lookup, which this gateway's pool answers without an engine)."""
    parts = [{"type": "text", "text": "hi"},
             {"type": "image_url", "image_url": {"url": "data:,", "detail": "low"}},
             {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]
    body = {"model": "m", "stream": None, "max_tokens": None, "temperature": 0, "n": 1,
            "messages": [{"role": "system", "content": None},
                         {"role": "assistant", "tool_calls": []},
                         {"role": "user", "content": parts}]}
    for fmt in ("chat", "completions"):
        schema.check(fmt, body)
    schema.check("completions", {"model": "m", "prompt": "hi"})  # no messages needed there


# -- errors --------------------------------------------------------------------------------------
def test_unknown_paths_and_wrong_methods_are_json(client: TestClient) -> None:
    for method, path in (("GET", "/nope"), ("POST", "/"), ("GET", "/v2/models"),
                         ("PUT", "/v1"), ("GET", "/V1/models")):
        reply = client.request(method, path)
        assert reply.status_code == 404 and problem(reply)["code"] == "unknown_path", path
    for method, path, allow in (("GET", "/v1/chat/completions", "POST"),
                                ("PUT", "/v1/chat/completions", "POST"),
                                ("DELETE", "/v1/models", "GET, HEAD"),
                                ("POST", "/health", "GET, HEAD"),
                                ("PATCH", "/metrics", "GET, HEAD")):
        reply = client.request(method, path)
        assert reply.status_code == 405, (method, path, reply.text)
        assert problem(reply)["code"] == "method_not_allowed"
        assert reply.headers["allow"] == allow


def test_an_unexpected_exception_is_one_line_and_a_500_json(
        client: TestClient, said: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_path: str, _body: Any) -> None:
        raise RuntimeError("a bug\nwith a second line")

    monkeypatch.setattr(schema, "check", broken)
    reply = client.post("/v1/chat/completions", json=CHAT)
    assert reply.status_code == 500 and problem(reply)["code"] == "internal_error"
    assert said == ["error: POST /v1/chat/completions: RuntimeError: a bug\\nwith a second line"]
    monkeypatch.undo()
    assert client.get("/health").status_code == 200  # serving on
    assert problem(client.post("/v1/chat/completions", json=without_role()))["param"] == \
        "messages[0].role"


def test_echoes_are_bounded(client: TestClient) -> None:
    for name in ("x" * (1 << 20), "y" * schema.MAX_MODEL):
        reply = client.post("/v1/chat/completions", json={**CHAT, "model": name})
        assert reply.status_code in (400, 404) and len(reply.content) < 600, len(reply.content)
        assert "x" * 101 not in reply.text and "y" * 101 not in reply.text
    reply = client.post("/v1/chat/completions", json={**CHAT, "model": "nope\x1b[2J"})
    assert reply.status_code == 404 and "\\x1b" in problem(reply)["message"]
    reply = client.post("/v1/" + "a" * 5000)
    assert reply.status_code == 404 and len(reply.content) < 800


def test_engine_error_answers_are_rewritten() -> None:
    """An engine's 4xx, or a 5xx its adapter reads as a request it could not parse, is a 400
    keeping its message; another 5xx is a 502; the gateway's own errors and 2xx pass."""
    import anyio

    from specctl.adapters.llamacpp import LlamaCpp
    from specctl.orchestrator.gateway.errors import EngineErrors, error

    def answer(status: int, body: bytes, own: bool = False) -> tuple[int, dict[str, Any]]:
        sent: list[Message] = []

        async def send(message: Message) -> None:
            sent.append(message)

        async def run() -> None:
            scope: dict[str, Any] = {"type": "http"}
            relay = EngineErrors(scope, send, LlamaCpp(), "smol")
            if own:
                return await error(status, "the gateway's")(scope, None, relay)  # type: ignore[arg-type]
            await relay({"type": "http.response.start", "status": status, "headers": []})
            await relay({"type": "http.response.body", "body": body[:5], "more_body": True})
            await relay({"type": "http.response.body", "body": body[5:], "more_body": False})

        anyio.run(run)
        out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return sent[0]["status"], json.loads(out) if out.startswith(b"{") else {"raw": out}

    def engine(status: int, message: str) -> bytes:
        return json.dumps({"error": {"code": status, "message": message,
                                     "type": "server_error"}}).encode()

    status, found = answer(500, engine(500, "Failed to parse messages: Missing 'role'"))
    assert status == 400 and found["error"]["message"] == "Failed to parse messages: Missing " \
        "'role'" and found["error"]["code"] == "engine_refused"
    assert answer(500, engine(500, "[json.exception.type_error.302] type must be string"))[0] \
        == 400
    status, found = answer(500, engine(500, "failed to decode the batch"))
    assert status == 502 and "smol's server failed (500): failed to decode" in \
        found["error"]["message"]
    assert answer(400, engine(400, "Field 'n': must be 1"))[0] == 400
    assert answer(422, b'{"error": "Input validation error", "error_type": "validation"}') == \
        (400, {"error": {"message": "Input validation error", "type": "invalid_request_error",
                         "param": None, "code": "engine_refused"}})
    assert answer(404, b'{"detail": "Not Found"}')[1]["error"]["message"] == "Not Found"
    assert answer(401, engine(401, "Invalid API Key"))[0] == 502  # the gateway's own key
    assert answer(503, b"<html>busy</html>")[1]["error"]["message"] == \
        "smol's server failed (503): <html>busy</html>"
    assert answer(200, b'{"choices": []}') == (200, {"choices": []})
    assert answer(503, b"", own=True) == (503, {"error": {
        "message": "the gateway's", "type": "server_error", "param": None, "code": None}})
    deep = b'{"error": ' + b"[" * 60_000 + b"]" * 60_000 + b"}"
    assert answer(500, deep)[0] == 502  # an answer too deep to read is still answered


# -- keys ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
@pytest.mark.parametrize("value", [" , ", "", ",", "  "])
def test_a_key_variable_with_no_key_is_refused(tmp_path: Path, host: str, value: str) -> None:
    env = {**os.environ, "SPECCTL_STATE_DIR": str(tmp_path / "s"),
           "SPECCTL_CONFIG_DIR": str(tmp_path / "c"), "SPECCTL_GATEWAY_API_KEY": value}
    done = subprocess.run([sys.executable, "-m", "specctl", "gateway", "--host", host,
                           "--port", str(free_port())], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "SPECCTL_GATEWAY_API_KEY is set but holds no key" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


# -- over a real uvicorn -------------------------------------------------------------------------
SERVE = textwrap.dedent("""
    import sys, uvicorn
    from specctl.orchestrator.app import App
    from specctl.orchestrator.gateway.asgi import Gateway
    from specctl.orchestrator.gateway.metrics import Metrics
    from specctl.orchestrator.gateway.owned import Engines
    from specctl.orchestrator.gateway.plans import Plans
    from specctl.orchestrator.gateway.pool import PoolSettings, Pool
    pool = Pool(Plans(App.from_env(), {}, {}, None), PoolSettings(), Metrics(), print,
                Engines(None, 60, 3))
    uvicorn.run(Gateway(pool, None, ()).app(), host="127.0.0.1", port=int(sys.argv[1]),
                log_level="warning")
""")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[int]:
    """The gateway's app (no model) served by uvicorn, as `specctl gateway` serves it."""
    port = free_port()
    env = {**os.environ, "SPECCTL_STATE_DIR": str(tmp_path / "s"),
           "SPECCTL_CONFIG_DIR": str(tmp_path / "c")}
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def exchange(port: int, request: bytes, wait: float = 5.0) -> bytes:
    """What the server sends back until it closes the connection (or `wait` passes)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request)
        sock.settimeout(wait)
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except TimeoutError:
            got += b"<still open>"
        return got


def test_expect_100_continue_past_the_limit_gets_413_and_no_invitation(served: int) -> None:
    got = exchange(served, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                   b"Content-Type: application/json\r\nContent-Length: 10737418240\r\n"
                   b"Expect: 100-continue\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 413 "), got
    assert b"100 Continue" not in got
    assert got.endswith(b'"code":"body_too_large"}}')  # and the server closed the connection
    within = exchange(served, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: 2\r\nExpect: 100-continue\r\n\r\n", wait=1.0)
    assert within.startswith(b"HTTP/1.1 100 Continue")  # within the limit: invited


def test_health_answers_while_a_big_body_is_parsed(served: int) -> None:
    """A 24 MiB body of 700,000 small messages (a long parse: one object at a time) to a model
    that is not served: while the gateway reads it, `/health` is answered again and again.
    Parsed on the event loop, no `/health` could be answered between the body's last byte and
    its reply."""
    body = json.dumps({"model": "nope", "messages": [{"role": "user", "content": "x"}] *
                       700_000}).encode()
    assert len(body) > 20 << 20
    answered: list[float] = []
    done = threading.Event()

    def ask() -> None:
        with httpx.Client(timeout=30) as c:
            while not done.is_set():
                c.get(f"http://127.0.0.1:{served}/health").raise_for_status()
                answered.append(time.monotonic())

    poller = threading.Thread(target=ask, daemon=True)
    poller.start()
    with socket.create_connection(("127.0.0.1", served)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        sent = time.monotonic()
        sock.settimeout(60)
        reply = sock.recv(65536)
        replied = time.monotonic()
        while not reply.endswith(b"}}"):
            reply += sock.recv(65536)
    done.set()
    poller.join(30)
    assert reply.startswith(b"HTTP/1.1 404 ") and b"is not served here" in reply, reply[:300]
    meanwhile = [t for t in answered if sent < t < replied]
    assert len(meanwhile) >= 3, (len(meanwhile), replied - sent)
    waits = [b - a for a, b in zip([sent, *meanwhile], [*meanwhile, replied], strict=True)]
    assert max(waits) < (replied - sent) / 2, (max(waits), replied - sent)
