"""A hostile client against the real gateway (`specctl gateway` in a subprocess) in front of a
real llama-server (SmolLM2 135M): the engine's own API stays out of reach whatever the path
says, hostile bodies and malformed requests are 400s in OpenAI's shape (those only the engine
can judge keep its message), and the gateway serves on. Requests whose path matters are written
on a raw socket: a client library would tidy them up."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.test_gateway import SMOL, Gateway, chat, env, gateways, profile, start  # noqa: F401

pytestmark = pytest.mark.server
CHAT = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
        "temperature": 0}


def raw(gw: Gateway, target: bytes, body: bytes, headers: bytes = b"") -> tuple[int, bytes]:
    """POST `target` as written (nothing decoded or resolved on the way): status and body."""
    port = int(gw.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(b"POST " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     b"Content-Type: application/json\r\n" + headers + b"Content-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
    head, _, rest = got.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        rest = dechunked(rest)
    return int(head.split(b" ", 2)[1]), rest


def dechunked(data: bytes) -> bytes:
    out = b""
    while True:
        size, _, data = data.partition(b"\r\n")
        length = int(size.split(b";")[0], 16)
        if not length:
            return out
        out, data = out + data[:length], data[length + 2:]


def served(env: dict[str, str], tmp_path: Path, gateways: list[Gateway]) -> Gateway:  # noqa: F811
    profile(env, "smol", SMOL + "k = 3\n[server]\ncontext = 1024\n")
    gw = start(env, tmp_path, "smol")
    gateways.append(gw)
    assert chat(gw, "smol")  # its engine is up
    return gw


ENGINE_API = [b"/v1/%2e%2e/tokenize", b"/v1/%2E%2E/tokenize", b"/v1/../tokenize",
              b"/v1/./../tokenize", b"/v1/%2e%2e%2ftokenize", b"/v1/chat/%2e%2e/%2e%2e/tokenize",
              b"/v1/..;/tokenize", b"/v1/%252e%252e/tokenize", b"/v1/..%5ctokenize",
              b"/v1/%2e%2e/completion", b"/v1/%2e%2e/completions", b"/v1/%2e%2e/slots/0",
              b"/v1/%2e%2e/slots/0?action=erase", b"/v1/%2e%2e/props", b"/v1/%2e%2e/apply-template",
              b"/v1/%2e%2e/detokenize", b"/v1/tokenize", b"/v1//tokenize",
              b"/v1/chat/completions/input_tokens", b"/v1/chat/completions%00",
              b"/v1/chat/completions;x=1", b"/V1/Chat/Completions", b"/v1/chat//completions",
              b"/v1/chat/completions/", b"/v1/embeddings"]


def test_the_engines_own_api_is_out_of_reach(env: dict[str, str], tmp_path: Path,  # noqa: F811
                                             gateways: list[Gateway]) -> None:  # noqa: F811
    gw = served(env, tmp_path, gateways)
    port = gw.engines()["smol"]["port"]
    asked = {"model": "smol", "content": "hello", "prompt": "hi", "tokens": [1, 2],
             "n_predict": 2, **CHAT}
    body = json.dumps(asked).encode()
    direct = httpx.post(f"http://127.0.0.1:{port}/tokenize", json=asked, timeout=30)
    assert direct.status_code == 200 and "tokens" in direct.json()  # the engine has it
    for target in ENGINE_API:
        status, answer = raw(gw, target, body)
        assert status == 404, (target, status, answer[:300])
        found = json.loads(answer)["error"]
        assert found["code"] == "unknown_path" and found["type"] == "not_found_error", target
    found = json.loads(raw(gw, b"/v1/embeddings", body)[1])["error"]
    assert "smol's server has no '/v1/embeddings'" in found["message"]  # its adapter's list
    for target, kind in ((b"/v1/chat%2fcompletions", "chat.completion"),
                         (b"/v1/chat/%2e/completions", "chat.completion"),
                         (b"/v1/completions?slot_id=0&x=%2e%2e", "text_completion")):
        status, answer = raw(gw, target, body)  # decoded, normalised: sent as the canonical path
        assert status == 200 and json.loads(answer)["object"] == kind, (target, answer[:300])


def hostile(name: str) -> bytes:
    ok = json.dumps(CHAT)
    bodies = {
        "utf-16": ok.encode("utf-16"),
        "1e999": ok.replace('"temperature": 0', '"temperature": 1e999').encode(),
        "NaN": ok.replace('"temperature": 0', '"temperature": NaN').encode(),
        "deep": b"[" * 100_000 + b"]" * 100_000,
        "deep-inside": ok.replace('"hi"', '"hi", "x": ' + "[" * 5000 + "]" * 5000).encode(),
        "duplicate": ok.replace('"max_tokens": 2', '"max_tokens": 2, "max_tokens": 9').encode(),
        "lone-surrogate": ok.replace('"hi"', '"\\udc00"').encode(),
    }
    return bodies[name]


def request(**changes: Any) -> bytes:
    return json.dumps({**CHAT, **changes}).encode()


def test_hostile_and_malformed_requests_are_400s_and_the_gateway_serves_on(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway]) -> None:  # noqa: F811
    gw = served(env, tmp_path, gateways)
    url = f"{gw.url}/v1/chat/completions"
    for name in ("utf-16", "1e999", "NaN", "deep", "deep-inside", "duplicate",
                 "lone-surrogate"):
        reply = httpx.post(url, content=hostile(name), timeout=30)
        assert reply.status_code == 400, (name, reply.status_code, reply.text[:300])
        assert reply.json()["error"]["type"] == "invalid_request_error", name
    # what the gateway checks itself: the field is named
    for body, param in ((request(messages=[{"content": "hi"}]), "messages[0].role"),
                        (request(messages=[{"role": "user", "content": [{"type": "text",
                                                                          "text": 5}]}]),
                         "messages[0].content[0].text"),
                        (request(stream="yes"), "stream")):
        reply = httpx.post(url, content=body, timeout=30)
        assert reply.status_code == 400 and reply.json()["error"]["param"] == param, reply.text
    # what only the engine judges: its 500 (a request it could not read) and its 400, as 400s
    # keeping its message
    call = [{"role": "assistant", "content": "x", "tool_calls": [5]},
            {"role": "user", "content": "hi"}]
    image = [{"role": "user", "content": [{"type": "image_url",
                                           "image_url": {"url": "data:image/png;base64,AA"}}]}]
    for body, said in ((request(messages=call), "Failed to parse messages"),
                       (request(messages=call, stream=True), "Failed to parse messages"),
                       (request(messages=image), "image input is not supported"),
                       (request(max_tokens=-5), "Field 'max_tokens'")):
        reply = httpx.post(url, content=body, timeout=30)
        assert reply.status_code == 400, (said, reply.status_code, reply.text[:300])
        found = reply.json()["error"]
        assert found["code"] == "engine_refused" and found["message"].startswith(said), found
    # echoes are bounded: a 1 MiB model name, a long unknown one
    for name in ("x" * (1 << 20), "y" * 200):
        reply = httpx.post(url, content=request(model=name), timeout=30)
        assert reply.status_code in (400, 404) and len(reply.content) < 600
    # a declared body past the limit, with Expect: 100-continue: 413, and no invitation
    port = int(gw.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                     b"10737418240\r\nExpect: 100-continue\r\n\r\n")
        first = sock.recv(65536)
    assert first.startswith(b"HTTP/1.1 413 ") and b"100 Continue" not in first
    assert chat(gw, "smol")  # serving on, the engine never restarted
    text = gw.log.read_text()
    assert "Traceback" not in text and text.count("starting smol") == 1, text
