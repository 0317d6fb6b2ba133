"""A FAKE Ollama daemon, for tests only: no Ollama server can be installed on this machine (Debian
and PyPI carry only the `ollama` client). It mimics the HTTP protocol of Ollama's API (paths,
request and response shapes, status codes) closely enough for specctl's probe, setup and
OpenAI-compatible calls, and reads models from a real on-disk Ollama store ($OLLAMA_MODELS).
It generates no real text: replies are a fixed sentence.

Run as `python tests/fake_ollama.py serve` (tests put a `tests/bin/ollama` shim on PATH); it
listens on $OLLAMA_HOST (default 127.0.0.1:11434) and reports $FAKE_OLLAMA_VERSION. `/api/pull`
copies a model from $FAKE_OLLAMA_REGISTRY (a folder laid out as an Ollama store, standing in for
the registry) into the store, streaming progress lines as Ollama does.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPLY = "This is a fake Ollama reply."
created: dict[str, dict[str, Any]] = {}  # derived models from /api/create


def store_models() -> dict[str, dict[str, Any]]:
    root = Path(os.environ.get("OLLAMA_MODELS", Path.home() / ".ollama" / "models"))
    base = root / "manifests" / "registry.ollama.ai" / "library"
    found: dict[str, dict[str, Any]] = {}
    if base.is_dir():
        for manifest in sorted(base.glob("*/*")):
            data = json.loads(manifest.read_text())
            layer = next(x for x in data["layers"]
                         if x["mediaType"] == "application/vnd.ollama.image.model")
            name = f"{manifest.parent.name}:{manifest.name}"
            found[name] = {"name": name, "model": name, "digest": layer["digest"],
                           "size": layer["size"], "parameters": ""}
    return found


def all_models() -> dict[str, dict[str, Any]]:
    return {**store_models(), **created}


def _store(env: str, default: Path) -> Path:
    return Path(os.environ.get(env, default))


def pull(name: str) -> list[dict[str, Any]]:
    """The progress lines of `ollama pull NAME`, copying from the stand-in registry."""
    base, _, tag = name.partition(":")
    rel = Path("manifests") / "registry.ollama.ai" / "library" / base / (tag or "latest")
    registry = _store("FAKE_OLLAMA_REGISTRY", Path("/nonexistent"))
    store = _store("OLLAMA_MODELS", Path.home() / ".ollama" / "models")
    if not (registry / rel).is_file():
        return [{"status": "pulling manifest"},
                {"error": "pull model manifest: file does not exist"}]
    manifest = json.loads((registry / rel).read_text())
    lines: list[dict[str, Any]] = [{"status": "pulling manifest"}]
    for layer in manifest["layers"]:
        blob = registry / "blobs" / layer["digest"].replace(":", "-")
        if not blob.is_file():
            continue
        total = blob.stat().st_size
        for done in (0, total // 2, total):
            lines.append({"status": f"pulling {layer['digest'][7:19]}",
                          "digest": layer["digest"], "total": total, "completed": done})
        (store / "blobs").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(blob, store / "blobs" / blob.name)
    (store / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(registry / rel, store / rel)
    return [*lines, {"status": "verifying sha256 digest"}, {"status": "writing manifest"},
            {"status": "success"}]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt: str, *args: Any) -> None:  # quiet, like a daemon's stdout
        sys.stdout.write(f"[fake-ollama] {self.command} {self.path}\n")
        sys.stdout.flush()

    def send(self, code: int, body: dict[str, Any]) -> None:
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        data = json.loads(self.rfile.read(length) or b"{}")
        return data if isinstance(data, dict) else {}

    def do_GET(self) -> None:
        if self.path == "/api/version":
            self.send(200, {"version": os.environ.get("FAKE_OLLAMA_VERSION", "0.32.14")})
        elif self.path == "/api/tags":
            self.send(200, {"models": [{"name": m["name"], "model": m["model"],
                                        "modified_at": "2026-12-01T00:00:00Z",
                                        "size": m["size"], "digest": m["digest"],
                                        "details": {"format": "gguf"}}
                                       for m in all_models().values()]})
        elif self.path == "/api/ps":
            self.send(200, {"models": []})
        elif self.path == "/":
            self.send(200, {"status": "Ollama is running"})
        else:
            self.send(404, {"error": "404 page not found"})

    def stream(self, lines: list[dict[str, Any]]) -> None:
        raw = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_POST(self) -> None:
        req = self.body()
        name = str(req.get("model") or req.get("name") or "")
        models = all_models()
        if self.path == "/api/pull":
            self.stream(pull(name))
        elif self.path == "/api/create":
            source = str(req.get("from", ""))
            if source not in models:
                self.send(404, {"error": f"model '{source}' not found"})
                return
            params = " ".join(f"{k} {v}" for k, v in (req.get("parameters") or {}).items())
            created[name] = {**models[source], "name": name, "model": name,
                             "parameters": params}
            self.send(200, {"status": "success"})
        elif name not in models and self.path != "/v1/chat/completions":
            self.send(404, {"error": f"model '{name}' not found, try pulling it first"})
        elif self.path == "/api/show":
            self.send(200, {"modelfile": f"FROM {name}", "parameters": models[name]["parameters"],
                            "details": {"format": "gguf"}, "capabilities": ["completion"]})
        elif self.path == "/api/generate":
            self.send(200, {"model": name, "created_at": "2026-12-01T00:00:00Z",
                            "response": "" if not req.get("prompt") else REPLY, "done": True,
                            "done_reason": "load" if not req.get("prompt") else "stop"})
        elif self.path == "/api/chat":
            self.send(200, {"model": name, "created_at": "2026-12-01T00:00:00Z",
                            "message": {"role": "assistant", "content": REPLY}, "done": True,
                            "eval_count": 7, "eval_duration": 70_000_000})
        elif self.path == "/v1/chat/completions":
            if name not in models:
                self.send(404, {"error": {"message": f"model \"{name}\" not found",
                                          "type": "api_error"}})
                return
            self.send(200, {"id": "chatcmpl-1", "object": "chat.completion",
                            "created": int(time.time()), "model": name,
                            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                "role": "assistant", "content": REPLY}}],
                            "usage": {"prompt_tokens": 5, "completion_tokens": 7,
                                      "total_tokens": 12}})
        else:
            self.send(404, {"error": "404 page not found"})


def main(argv: list[str]) -> int:
    if argv[1:2] == ["--version"]:  # what the real binary prints when no daemon runs
        print("Warning: could not connect to a running Ollama instance")
        print(f"Warning: client version is {os.environ.get('FAKE_OLLAMA_VERSION', '0.32.14')}")
        return 0
    if argv[1:2] != ["serve"]:
        print("fake ollama: only `serve` is implemented", file=sys.stderr)
        return 2
    host, _, port = os.environ.get("OLLAMA_HOST", "127.0.0.1:11434").rpartition(":")
    server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
    print(f"[fake-ollama] listening on {host}:{port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
