"""One OpenAI-compatible chat request to an endpoint's API root, timed. Uses the server's own
decode timing when its adapter can read one from the reply, else completion tokens over wall
time."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from specctl.orchestrator.contract.launch import Endpoint
from specctl.orchestrator.errors import ServerError

Timing = Callable[[Mapping[str, Any]], tuple[int, float] | None]


@dataclass(frozen=True)
class Reply:
    text: str
    tokens: int
    decode_tps: float
    wall_s: float
    timed_by: str  # "server" | "client"
    raw: dict[str, Any]


def _no_timing(_reply: Mapping[str, Any]) -> tuple[int, float] | None:
    return None


Token = int | str


def sample(endpoint: Endpoint, prompt: str, max_tokens: int, temperature: float, top_p: float,
           seed: int, n: int, model: str | None = None, timeout: float = 600
           ) -> list[list[Token]]:
    """`n` sampled completions of one chat request: each as its token ids (from the reply's
    logprobs), or as its characters when the server does not report tokens."""
    import requests

    body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}],
                            "max_tokens": max_tokens, "temperature": temperature,
                            "top_p": top_p, "seed": seed, "n": n, "logprobs": True,
                            "stream": False}
    if model:
        body["model"] = model
    url = f"{endpoint.api.rstrip('/')}/chat/completions"
    try:
        resp = requests.post(url, json=body, headers=endpoint.headers(), timeout=timeout)
    except requests.RequestException as exc:
        raise ServerError(f"request to {url} failed: {exc}") from None
    if resp.status_code != 200:
        raise ServerError(f"{url} answered {resp.status_code}: {resp.text[:200]}")
    try:
        return [_tokens(choice) for choice in resp.json()["choices"]]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ServerError(f"{url} answered something that is not a chat completion: "
                          f"{resp.text[:200]!r}") from None


def _tokens(choice: Mapping[str, Any]) -> list[Token]:
    content = (choice.get("logprobs") or {}).get("content")
    if isinstance(content, list) and content:
        return [int(t["id"]) if isinstance(t.get("id"), int) else str(t["token"])
                for t in content]
    return list(str(choice["message"].get("content") or ""))


def chat(endpoint: Endpoint, prompt: str, max_tokens: int, timeout: float = 600,
         timing: Timing = _no_timing, model: str | None = None) -> Reply:
    import requests

    body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}],
                            "max_tokens": max_tokens, "temperature": 0, "seed": 0,
                            "stream": False}
    if model:
        body["model"] = model
    url = f"{endpoint.api.rstrip('/')}/chat/completions"
    start = time.perf_counter()
    try:
        resp = requests.post(url, json=body, headers=endpoint.headers(), timeout=timeout)
    except requests.RequestException as exc:
        raise ServerError(f"request to {url} failed: {exc}") from None
    wall = time.perf_counter() - start
    if resp.status_code != 200:
        raise ServerError(f"{url} answered {resp.status_code}: {resp.text[:200]}")
    try:
        data: dict[str, Any] = resp.json()
        text = data["choices"][0]["message"].get("content") or ""
        tokens = int(data.get("usage", {}).get("completion_tokens", 0))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise ServerError(f"{url} answered something that is not a chat completion: "
                          f"{resp.text[:200]!r}") from None
    measured = timing(data)
    if measured is not None:
        return Reply(text, measured[0] or tokens, measured[1], wall, "server", data)
    return Reply(text, tokens, tokens / wall if wall > 0 else 0.0, wall, "client", data)
