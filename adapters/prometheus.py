"""Read counters from a Prometheus text exposition (llama.cpp `/metrics`, vLLM `/metrics`)."""

from __future__ import annotations

from specctl.orchestrator import http
from specctl.orchestrator.contract.launch import Endpoint
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.errors import BackendError
from specctl.orchestrator.exposition import Samples as Samples
from specctl.orchestrator.exposition import parse as parse
from specctl.orchestrator.exposition import total as total

MAX_POSITIONS = 256  # draft positions a server may report (k is at most 32)


def spec_stats(text: str, prefix: str, source: str) -> SpecStats:
    samples = parse(text)
    positions: dict[int, float] = {}
    for (name, labels), value in samples.items():
        if name == f"{prefix}spec_decode_num_accepted_tokens_per_pos_total":
            pos = dict(labels).get("position")
            if pos is not None and pos.isdigit() and int(pos) < MAX_POSITIONS:
                positions[int(pos)] = positions.get(int(pos), 0.0) + value
    per_pos = tuple(int(positions.get(i, 0)) for i in range(max(positions, default=-1) + 1))
    return SpecStats(
        drafted=int(total(samples, f"{prefix}spec_decode_num_draft_tokens_total")),
        accepted=int(total(samples, f"{prefix}spec_decode_num_accepted_tokens_total")),
        drafts=int(total(samples, f"{prefix}spec_decode_num_drafts_total")),
        per_position=per_pos, source=source,
    )


def fetch(endpoint: Endpoint, timeout: float = 5.0) -> str:
    """The endpoint's metrics page (its adapter says where it is)."""
    url = endpoint.metrics
    if not url:
        raise BackendError("this server has no metrics endpoint")
    try:
        resp = http.get(url, headers=endpoint.headers(), timeout=timeout)
    except http.Unreachable as exc:
        raise BackendError(f"cannot read the metrics page ({exc})") from None
    if resp.status_code != 200:
        raise BackendError(f"{url} answered {resp.status_code}; is the metrics endpoint "
                           "enabled?")
    return resp.text
