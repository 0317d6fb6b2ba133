"""What is installed and how it starts: the values a backend's probe and `launch(plan)` return
and the core runs (argv, environment, URLs), and the endpoint clients reach.

`Launch` is a frozen pydantic model: `up` hands it to its detached supervisor as JSON
(runtime/handoff.py), and the supervisor reads it back with the same model, as untrusted input:
no unknown keys, a program to run, at most 16 failing health answers."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer

Progress = Callable[[str, int, int], None]
"""A step of long work (an engine's install): its message, the steps done and their total (0:
not known), for a progress bar."""


@dataclass(frozen=True)
class Installed:
    backend: str
    version: str
    dialect: str
    path: str | None = None
    flags: frozenset[str] = frozenset()
    methods: frozenset[str] = frozenset()
    chains: bool = False  # takes several methods at once (a plan's `chain`)
    assumed: bool = False  # not installed here: planning with the newest known dialect

    def describe(self) -> str:
        where = "assumed, not installed here" if self.assumed else self.path or "?"
        return f"{self.backend} {self.version} ({self.dialect} dialect; {where})"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HttpCall(_Frozen):
    """A request the supervisor sends once the server is healthy (e.g. a model to load)."""

    method: str
    url: str
    body: Mapping[str, object] = Field(default_factory=dict)


class Launch(_Frozen):
    argv: tuple[str, ...] = Field(min_length=1)
    env: Mapping[str, str] = Field(default_factory=dict)
    health_url: str = ""
    # health answers that mean the start failed
    health_failed: frozenset[int] = Field(frozenset(), max_length=16)
    base_url: str = ""  # the OpenAI-compatible API root, e.g. http://127.0.0.1:8080/v1
    metrics_url: str | None = None
    # backend variable -> the user's variable it is copied from at spawn time (API keys: the
    # value never enters argv, the plan or a log)
    env_from: Mapping[str, str] = Field(default_factory=dict)
    setup: tuple[HttpCall, ...] = ()
    model: str | None = None  # the model name clients should send, when the server needs one

    @field_serializer("health_failed")
    def _in_order(self, codes: frozenset[int]) -> list[int]:
        return sorted(codes)

    @classmethod
    def http(cls, argv: Sequence[str], host: str, port: int, *, health: str = "/health",
             metrics: str | None = "/metrics", **rest: Any) -> Launch:
        """A server that speaks HTTP on host:port, reached as clients here reach it
        (root_url): its health check, its OpenAI-compatible root (/v1) and its metrics."""
        url = root_url(host, port)
        return cls(argv=tuple(argv), health_url=f"{url}{health}", base_url=f"{url}/v1",
                   metrics_url=f"{url}{metrics}" if metrics else None, **rest)


def is_loopback(host: str) -> bool:
    """Does a server bound to `host` stay on this machine? Host names are case-blind
    (LOCALHOST is localhost), and an IPv4 loopback mapped into IPv6 is loopback too."""
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


_LABEL = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")


def host_problem(host: str) -> str | None:
    """Why `host` cannot be bound (an IP address or a host name is wanted), or None."""
    try:
        ipaddress.ip_address(host.strip("[]") if host.startswith("[") else host)
        return None
    except ValueError:
        pass
    if len(host) <= 253 and _HOST_NAME.fullmatch(host):
        return None
    return (f"{host!r} is not an address; give an IP address or a host name (127.0.0.1, "
            "0.0.0.0 for every interface, ::1, localhost)")


def url_host(host: str) -> str:
    """`host` as a URL's host part, for clients on this machine: a wildcard bind (0.0.0.0,
    ::, empty) is reached on loopback, and an IPv6 address goes in brackets (http://[::1]:8080)."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host.strip('[]')}]" if ":" in host else host


def root_url(host: str, port: int) -> str:
    """http://HOST:PORT of a server bound to host:port, as clients on this machine reach it."""
    return f"http://{url_host(host)}:{port}"


def api_key(env_from: Mapping[str, str], environ: Mapping[str, str]) -> str | None:
    """The API key a launch copies from the user's environment (see Launch.env_from), if any;
    an empty variable is no key."""
    return next((environ.get(source) or None for source in env_from.values()), None)


@dataclass(frozen=True)
class Endpoint:
    """A running server as clients see it: its API root, its metrics, its key."""

    api: str  # OpenAI-compatible root (…/v1)
    metrics: str | None = None
    api_key: str | None = None

    @classmethod
    def of(cls, launch: Launch, environ: Mapping[str, str]) -> Endpoint:
        return cls(launch.base_url, launch.metrics_url, api_key(launch.env_from, environ))

    @property
    def root(self) -> str:
        """The server's root, where an API path such as /v1/messages or /infill starts: the
        OpenAI-compatible root without its /v1."""
        return self.api.rstrip("/").removesuffix("/v1")

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
