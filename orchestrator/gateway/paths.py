"""Which `/v1/...` paths reach an engine: the OpenAI paths its adapter declares
(`Adapter.openai_paths`), matched on the request's path as decoded and normalised, never as
sent. The engine's own API (llama-server's /tokenize, /completion, /slots) is reachable only
through tricks on the raw path (`/v1/%2e%2e/tokenize`); here such a path is what it decodes to
(`/tokenize`), which is not an OpenAI path, so it is a 404 at the gateway.

Normalising is RFC 3986's: the path is percent-decoded once (the server did it: `scope["path"]`)
and its `.` and `..` segments are resolved. Nothing else is forgiven: an empty segment (`//`, a
trailing `/`), a `;` parameter, a backslash, another case, a NUL or a `%` left by double
encoding makes a path no declared one is. The engine is sent the canonical path alone.
"""

from __future__ import annotations

import functools

from specctl.orchestrator.contract import registry
from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.gateway.pool import Pool

PREFIX = "/v1/"


def canonical(path: str) -> str | None:
    """The path below /v1/ that `path` (decoded) names once its dot segments are resolved
    ("chat/completions"), or None when it is not below /v1/."""
    out: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if not out:
                return None
            out.pop()
        elif segment != ".":
            out.append(segment)
    if len(out) < 2 or out[0] != PREFIX.strip("/"):
        return None
    return "/".join(out[1:])


@functools.cache
def declared() -> frozenset[str]:
    """Every path some adapter declares: a path outside it is refused before the body is read
    (the model, and so its adapter, is known only from the body)."""
    return frozenset().union(*(cls.openai_paths for cls in
                               registry.adapter_classes().values()))


class Backends:
    """The adapter of each model, as the gateway resolved it at its start (gateway/plans.py):
    asking it resolves nothing."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def of(self, model: str) -> Adapter | None:
        """None: the model is not served here (the pool says so when it is asked for it)."""
        served = self.pool.plans.served.get(model)
        return served.resolved.backend if served is not None else None
