"""specctl's own HTTP requests, through one client (httpx), with transport errors mapped once.

Engines' health, metrics and post-start setup, the measurement's chat requests and Ollama's
daemon all ask here. A request that gets no answer (refused, reset, a name that does not
resolve, a timeout) raises `Unreachable`, whose message names the method, the URL and what went
wrong; an answer of any status is the caller's to read. The gateway's relay keeps its own
asynchronous httpx client (one connection pool for every stream it passes on); the Hugging Face
Hub is asked through huggingface_hub.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeAlias

from specctl.orchestrator.errors import SpecctlError

if TYPE_CHECKING:  # httpx is imported when a request is made: a plan makes none
    import httpx

Timeout: TypeAlias = "float | httpx.Timeout"  # seconds for every phase, or httpx's per phase


class Unreachable(SpecctlError):
    """No answer from a URL. Callers that have a better word (a server that failed, a daemon
    not running) say it; one that does not lets this line reach the user."""


def why(exc: httpx.HTTPError) -> str:
    """What went wrong, in a few words ('timed out', 'ConnectError: [Errno 111] ...')."""
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def request(method: str, url: str, *, timeout: Timeout, json: Any = None,
            headers: Mapping[str, str] | None = None) -> httpx.Response:
    """One request, its whole answer read."""
    import httpx

    try:
        return httpx.request(method, url, json=json, headers=dict(headers or {}),
                             timeout=timeout)
    except httpx.HTTPError as exc:
        raise Unreachable(f"{method} {url}: {why(exc)}") from None


def get(url: str, *, timeout: Timeout, headers: Mapping[str, str] | None = None
        ) -> httpx.Response:
    return request("GET", url, timeout=timeout, headers=headers)


@contextmanager
def stream(method: str, url: str, *, timeout: Timeout, json: Any = None,
           headers: Mapping[str, str] | None = None) -> Iterator[httpx.Response]:
    """One request whose answer is read as it comes (`iter_lines`); a transport error while it
    is read is `Unreachable` too."""
    import httpx

    try:
        with httpx.stream(method, url, json=json, headers=dict(headers or {}),
                          timeout=timeout) as resp:
            yield resp
    except httpx.HTTPError as exc:
        raise Unreachable(f"{method} {url}: {why(exc)}") from None
