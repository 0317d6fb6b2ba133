"""Which paths reach an engine: the API paths its adapter declares (`Adapter.api_paths`: below
/v1/, or at the root like /infill), matched on the request's path as decoded and normalised,
never as sent. The engine's own API (llama-server's /tokenize, /completion, /slots) is reachable
only through tricks on the raw path (`/v1/%2e%2e/tokenize`); here such a path is what it decodes
to (`/tokenize`), which no adapter declares, so it is a 404 at the gateway.

Normalising is RFC 3986's: the path is percent-decoded once (the server did it: `scope["path"]`)
and its `.` and `..` segments are resolved (a `..` above the root is no path). Nothing else is
forgiven: an empty segment (`//`, a trailing `/`), a `;` parameter, a backslash, another case, a
NUL or a `%` left by double encoding makes a path no declared one is. The engine is sent the
canonical path alone. A path at the root (/infill) is routed only as itself: there a dot segment
(`/./infill`) is a 404 (a path below /v1/ that resolves to it, `/v1/../infill`, is matched).
"""

from __future__ import annotations

import functools

from specctl.orchestrator.contract import registry
from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.gateway.pool import Pool


def canonical(path: str) -> str | None:
    """`path` (decoded) once its dot segments are resolved ("/v1/chat/completions"), or None
    when a `..` climbs above the root."""
    out: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if not out:
                return None
            out.pop()
        elif segment != ".":
            out.append(segment)
    return "/" + "/".join(out)


@functools.cache
def declared() -> frozenset[str]:
    """Every path some adapter declares: a path outside it is refused before the body is read
    (the model, and so its adapter, is known only from the body)."""
    return frozenset().union(*(cls.api_paths for cls in registry.adapter_classes().values()))


def at_root() -> list[str]:
    """The declared paths outside /v1/ (the gateway routes each as it is)."""
    return sorted(p for p in declared() if not p.startswith("/v1/"))


class Backends:
    """The adapter of each model, as the gateway resolved it at its start (gateway/plans.py):
    asking it resolves nothing."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def of(self, model: str) -> Adapter | None:
        """None: the model is not served here (the pool says so when it is asked for it)."""
        served = self.pool.plans.served.get(model)
        return served.resolved.backend if served is not None else None
