"""One OpenAI-compatible chat request to an endpoint's API root, streamed and timed as the client
sees it: the time to the first token (send -> first content), the whole request's (send -> last
byte), the prompt's tokens (usage), the reply's tokens and text, and the server's own decode
timing where its adapter can read one from the stream (llama-server puts its `timings` in the
final chunk), else the stream's: completion tokens over the time after the first token."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specctl.orchestrator import http
from specctl.orchestrator.contract.launch import Endpoint
from specctl.orchestrator.errors import ServerError

Timing = Callable[[Mapping[str, Any]], tuple[int, float] | None]
Message = Mapping[str, str]


@dataclass(frozen=True)
class Reply:
    text: str
    tokens: int
    decode_tps: float
    wall_s: float  # send -> last byte: what the client waited for
    timed_by: str  # "server", "stream" (from the first token on) or "client" (the whole wall)
    raw: dict[str, Any]  # the final chunk (usage, the server's timings)
    ttft_s: float = 0.0  # send -> first content token
    prompt_tokens: int = 0  # usage.prompt_tokens: the whole prompt, the template included


class TooLong(ServerError):
    """The prompt does not fit the server's context (the figures where the server gave them)."""

    def __init__(self, message: str, prompt_tokens: int | None, context: int | None) -> None:
        super().__init__(message)
        self.prompt_tokens, self.context = prompt_tokens, context


def _no_timing(_reply: Mapping[str, Any]) -> tuple[int, float] | None:
    return None


Token = int | str


def _url(endpoint: Endpoint) -> str:
    return f"{endpoint.api.rstrip('/')}/chat/completions"


def sample(endpoint: Endpoint, prompt: str | Sequence[Message], max_tokens: int,
           temperature: float, top_p: float, seed: int, n: int, model: str | None = None,
           timeout: float = 600, extra: Mapping[str, Any] | None = None) -> list[list[Token]]:
    """`n` sampled completions of one chat request (a prompt, or messages): each as its token
    ids (from the reply's logprobs), or as its characters when the server does not report
    tokens. `extra`: more fields of the request (a `response_format`)."""
    body: dict[str, Any] = {**(extra or {}), "messages": messages_of(prompt),
                            "max_tokens": max_tokens, "temperature": temperature,
                            "top_p": top_p, "seed": seed, "n": n, "logprobs": True,
                            "stream": False}
    if model:
        body["model"] = model
    url = _url(endpoint)
    try:
        resp = http.request("POST", url, json=body, headers=endpoint.headers(), timeout=timeout)
    except http.Unreachable as exc:
        raise ServerError(f"request failed: {exc}") from None
    if resp.status_code != 200:
        raise _refused(url, resp.status_code, resp.text)
    try:
        return [_tokens(choice) for choice in resp.json()["choices"]]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ServerError(f"{url} answered something that is not a chat completion: "
                          f"{resp.text[:200]!r}") from None


def answer(endpoint: Endpoint, path: str, body: Mapping[str, Any], timeout: float = 600
           ) -> dict[str, Any]:
    """One request to `path` below the API root, not streamed (`messages`, `chat/completions`),
    and its JSON answer as it came; a refusal or an answer that is not a JSON object is a
    ServerError that says which."""
    url = f"{endpoint.api.rstrip('/')}/{path}"
    try:
        resp = http.request("POST", url, json={**body, "stream": False},
                            headers=endpoint.headers(), timeout=timeout)
    except http.Unreachable as exc:
        raise ServerError(f"request failed: {exc}") from None
    if resp.status_code != 200:
        raise _refused(url, resp.status_code, resp.text)
    try:
        got = resp.json()
    except ValueError:
        got = None
    if not isinstance(got, dict):
        raise ServerError(f"{url} answered something that is not a JSON object: "
                          f"{resp.text[:200]!r}")
    return got


def _tokens(choice: Mapping[str, Any]) -> list[Token]:
    content = (choice.get("logprobs") or {}).get("content")
    if isinstance(content, list) and content:
        return [int(t["id"]) if isinstance(t.get("id"), int) else str(t["token"])
                for t in content]
    return list(str(choice["message"].get("content") or ""))


def _refused(url: str, status: int, text: str) -> ServerError:
    """The server's refusal as an error; one whose prompt exceeds the context (llama-server:
    400 with n_prompt_tokens and n_ctx) as TooLong with the figures."""
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, Mapping):
        n_prompt, n_ctx = error.get("n_prompt_tokens"), error.get("n_ctx")
        if (isinstance(n_prompt, int) and isinstance(n_ctx, int)) or "context" in str(
                error.get("type", "")):
            return TooLong(f"{url} refused the prompt: {str(error.get('message'))[:200]}",
                           n_prompt if isinstance(n_prompt, int) else None,
                           n_ctx if isinstance(n_ctx, int) else None)
    return ServerError(f"{url} answered {status}: {text[:200]}")


def messages_of(prompt: str | Sequence[Message]) -> list[dict[str, str]]:
    """A prompt as chat messages: text is one user message."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [dict(m) for m in prompt]


@dataclass
class _Stream:
    """What a streamed reply said, read event by event."""

    timing: Timing
    start: float
    first: float | None = None
    parts: list[str] = field(default_factory=list)
    chunks: int = 0
    usage: dict[str, Any] = field(default_factory=dict)
    final: dict[str, Any] = field(default_factory=dict)
    measured: tuple[int, float] | None = None

    def read(self, lines: Iterable[str], url: str) -> None:
        for line in lines:
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if not payload or payload == "[DONE]":
                continue
            try:
                event = json.loads(payload)
            except ValueError:
                raise ServerError(f"{url} streamed something that is not JSON: "
                                  f"{payload[:200]!r}") from None
            if not isinstance(event, dict):
                continue
            if "error" in event:
                raise _refused(url, 200, payload)
            self.event(event)

    def event(self, event: dict[str, Any]) -> None:
        for choice in event.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, Mapping) else None
            text = delta.get("content") if isinstance(delta, Mapping) else None
            if isinstance(text, str) and text:
                if self.first is None:
                    self.first = time.perf_counter()
                self.parts.append(text)
                self.chunks += 1
        if isinstance(event.get("usage"), Mapping):
            self.usage = dict(event["usage"])
        measured = self.timing(event)
        if measured is not None:
            self.measured, self.final = measured, event
        elif self.usage and not self.final:
            self.final = event


def chat(endpoint: Endpoint, prompt: str | Sequence[Message], max_tokens: int,
         timeout: float = 600, timing: Timing = _no_timing, model: str | None = None,
         extra: Mapping[str, Any] | None = None) -> Reply:
    """One greedy request (a prompt, or a conversation's messages so far), streamed. `extra`:
    the backend's own fields (its adapter's, e.g. Adapter.uncached)."""
    body: dict[str, Any] = {**(extra or {}), "messages": messages_of(prompt),
                            "max_tokens": max_tokens, "temperature": 0, "seed": 0,
                            "stream": True, "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    url = _url(endpoint)
    start = time.perf_counter()
    got = _Stream(timing, start)
    try:
        with http.stream("POST", url, json=body, headers=endpoint.headers(),
                         timeout=timeout) as resp:
            if resp.status_code != 200:
                raise _refused(url, resp.status_code, resp.read().decode(errors="replace"))
            got.read(resp.iter_lines(), url)
    except http.Unreachable as exc:
        raise ServerError(f"request failed: {exc}") from None
    wall = time.perf_counter() - start
    ttft = (got.first or start + wall) - start
    tokens = int(got.usage.get("completion_tokens") or got.chunks)
    prompt_tokens = int(got.usage.get("prompt_tokens") or 0)
    text = "".join(got.parts)
    if got.measured is not None:
        return Reply(text, got.measured[0] or tokens, got.measured[1], wall, "server",
                     got.final, ttft, prompt_tokens)
    # the stream's clock, as a server times decoding: from the first token to the last (it
    # covers tokens - 1 of them: lab.Timed.decoded), tokens over that time
    after = wall - ttft
    if tokens > 1 and after > 0:
        return Reply(text, tokens, tokens / after, wall, "stream", got.final, ttft,
                     prompt_tokens)
    return Reply(text, tokens, tokens / wall if wall > 0 else 0.0, wall, "client", got.final,
                 ttft, prompt_tokens)
