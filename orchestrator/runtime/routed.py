"""What `status` reads of a run served through the router (`up` via `specctl gateway --warm`):
the draft counters of the gateway's own `/metrics`, summed over the model's settings, and its
engines' logs. The metric names and the log names are the gateway's (gateway/metrics.py and
gateway/engines.py take them from here)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from specctl.orchestrator import exposition, http
from specctl.orchestrator.contract.launch import Endpoint
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.errors import ServerError
from specctl.orchestrator.files import inside

DRAFTED = "specctl_gateway_draft_tokens"
ACCEPTED = "specctl_gateway_draft_accepted_tokens"


def is_router(cmdline: Sequence[str]) -> bool:
    """Whether a run's server is specctl's gateway (`python -m specctl gateway ...`, under the
    leash)."""
    words = list(cmdline)
    return any(words[i:i + 3] == ["-m", "specctl", "gateway"] for i in range(len(words)))


def engine_log(logs: Path, model: str, setting: str, routed: bool) -> Path:
    """A gateway engine's log: gateway-MODEL.log; a route's server's gateway-MODEL-SETTING.log
    (`setting` as Plan.short says it)."""
    name = re.sub(r"[^A-Za-z0-9.]+", "-", f"{model} {setting}") if routed else model
    return inside(logs, name, ".log", "model name", prefix="gateway-")


def stats(endpoint: Endpoint, timeout: float = 5.0) -> SpecStats:
    """The router's drafted and accepted tokens so far (ServerError when it cannot be read)."""
    url = endpoint.metrics
    if not url:
        raise ServerError("the router has no metrics endpoint")
    try:
        reply = http.get(url, headers=endpoint.headers(), timeout=timeout)
    except http.Unreachable as exc:
        raise ServerError(f"cannot read the router's metrics ({exc})") from None
    if reply.status_code != 200:
        raise ServerError(f"{url} answered {reply.status_code}")
    samples = exposition.parse(reply.text)
    return SpecStats(drafted=int(exposition.total(samples, f"{DRAFTED}_total")),
                     accepted=int(exposition.total(samples, f"{ACCEPTED}_total")),
                     source="the router's /metrics")
