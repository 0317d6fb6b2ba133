"""One OpenAI-compatible chat request, timed. Uses the server's own decode timing when it reports
one (llama.cpp `timings`), else completion tokens over wall time."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import requests

from specctl.adapters.base import Endpoint
from specctl.orchestrator.errors import ServerError


@dataclass(frozen=True)
class Reply:
    text: str
    tokens: int
    decode_tps: float
    wall_s: float
    timed_by: str  # "server" | "client"
    raw: dict[str, Any]


def chat(endpoint: Endpoint, prompt: str, max_tokens: int, timeout: float = 600) -> Reply:
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "seed": 0, "stream": False}
    start = time.perf_counter()
    try:
        resp = requests.post(f"{endpoint.url}/v1/chat/completions", json=body,
                             headers=endpoint.headers(), timeout=timeout)
    except requests.RequestException as exc:
        raise ServerError(f"request to {endpoint.url} failed: {exc}") from None
    wall = time.perf_counter() - start
    if resp.status_code != 200:
        raise ServerError(f"{endpoint.url} answered {resp.status_code}: {resp.text[:200]}")
    data: dict[str, Any] = resp.json()
    text = data["choices"][0]["message"].get("content") or ""
    tokens = int(data.get("usage", {}).get("completion_tokens", 0))
    timings = data.get("timings") or {}
    if timings.get("predicted_per_second"):
        return Reply(text, int(timings.get("predicted_n", tokens)),
                     float(timings["predicted_per_second"]), wall, "server", data)
    return Reply(text, tokens, tokens / wall if wall > 0 else 0.0, wall, "client", data)
