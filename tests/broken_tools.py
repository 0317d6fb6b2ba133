"""The `tool-call` break of tests/broken_engine.py: a llama-server whose speculation alters tool
calls (vLLM issue 25993: MTP broke them) and nothing else.

Asked to speculate with drafts it may accept (not the floor), it starts the REAL llama-server
on a port of its own and answers on the port it was given as a relay in front of it: every
request and answer passes through unchanged (health, metrics and their draft counters, streamed
chat replies), except a non-streamed `chat/completions` or `messages` answer with a tool call,
whose first call is altered: the first of its arguments that is a string loses its first
character ("Paris" -> "aris"; a call without one is renamed, `get_weather` -> `get_weather_`).
So greedy chat text and sampled chat text are the target's, and only a check of tool calls can
see the break.

Standard library only: the shims run it with the system python3.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length",
                 "proxy-connection", "te", "trailer", "upgrade"})
ALTERED_PATHS = ("/chat/completions", "/messages")


def altered_arguments(arguments: Any) -> tuple[Any, bool]:
    """The arguments with their first string value cut by its first character, and whether one
    was found."""
    if not isinstance(arguments, dict):
        return arguments, False
    for key, value in arguments.items():
        if isinstance(value, str) and value:
            return {**arguments, key: value[1:] if len(value) > 1 else value + "x"}, True
    return arguments, False


def alter(path: str, reply: dict[str, Any]) -> bool:
    """Alter the first tool call of a chat/completions or messages answer in place; whether
    there was one."""
    if path.endswith("/messages"):
        block = next((b for b in reply.get("content") or [] if b.get("type") == "tool_use"), None)
        if block is None:
            return False
        block["input"], found = altered_arguments(block.get("input"))
        if not found:
            block["name"] = f"{block['name']}_"
        return True
    calls = ((reply.get("choices") or [{}])[0].get("message") or {}).get("tool_calls") or []
    if not calls:
        return False
    function = calls[0]["function"]
    try:
        parsed = json.loads(function["arguments"])
    except ValueError:
        parsed = None
    changed, found = altered_arguments(parsed)
    if found:
        function["arguments"] = json.dumps(changed)
    else:
        function["name"] = f"{function['name']}_"
    return True


def rewritten(path: str, data: bytes) -> bytes:
    try:
        reply = json.loads(data)
    except ValueError:
        return data
    if isinstance(reply, dict) and alter(path, reply):
        return json.dumps(reply).encode()
    return data


def handler(inner: int) -> type[BaseHTTPRequestHandler]:
    class Relay(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.relay()

        def do_POST(self) -> None:
            self.relay()

        def log_message(self, format: str, *args: Any) -> None:
            return

        def relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            conn = http.client.HTTPConnection("127.0.0.1", inner, timeout=900)
            try:
                conn.request(self.command, self.path, body, {
                    k: v for k, v in self.headers.items() if k.lower() not in HOP})
                resp = conn.getresponse()
            except OSError:  # the real server is still starting
                self.send(503, b'{"error": {"code": 503, "message": "Loading model"}}',
                          "application/json")
                return
            kind = resp.getheader("Content-Type", "")
            if "text/event-stream" in kind:  # passed through as it comes, then closed
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP:
                        self.send_header(k, v)
                self.send_header("Connection", "close")
                self.end_headers()
                while chunk := resp.read1(65536):
                    self.wfile.write(chunk)
                    self.wfile.flush()
                self.close_connection = True
                return
            data = resp.read()
            if resp.status == 200 and self.path.split("?")[0].endswith(ALTERED_PATHS):
                data = rewritten(self.path.split("?")[0], data)
            self.send(resp.status, data, kind)

        def send(self, status: int, data: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind or "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Relay


def with_values(argv: Sequence[str], values: dict[str, str]) -> list[str]:
    """argv with each named flag's value replaced (added where it is missing)."""
    out = list(argv)
    for flag, value in values.items():
        if flag in out[:-1]:
            out[out.index(flag) + 1] = value
        else:
            out += [flag, value]
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def serve(real: str, argv: Sequence[str], host: str, port: int) -> None:
    """The real server on a port of its own, the relay on `host`:`port`, until either ends."""
    inner = free_port()
    child = subprocess.Popen([real, *with_values(argv, {"--host": "127.0.0.1",
                                                        "--port": str(inner)})])

    def stop(_signum: int, _frame: object) -> None:
        child.terminate()
        child.wait(30)
        os._exit(0)

    def watch() -> None:
        code = child.wait()
        os._exit(code or 1)

    signal.signal(signal.SIGTERM, stop)
    threading.Thread(target=watch, daemon=True).start()
    relay = ThreadingHTTPServer((host, port), handler(inner))
    relay.daemon_threads = True
    print(f"broken_tools: relaying {host}:{port} to llama-server on 127.0.0.1:{inner}; the first "
          "tool call of each answer altered", file=sys.stderr, flush=True)
    relay.serve_forever()
