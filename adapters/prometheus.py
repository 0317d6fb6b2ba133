"""Read counters from a Prometheus text exposition (llama.cpp `/metrics`, vLLM `/metrics`)."""

from __future__ import annotations

import re

import requests

from specctl.adapters.base import Endpoint, SpecStats
from specctl.orchestrator.errors import BackendError

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+([-+0-9.eEinfINFaN]+)')
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(metric name, sorted labels) -> value; comments and malformed lines skipped."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m:
            labels = tuple(sorted(_LABEL.findall(m.group(3) or "")))
            out[(m.group(1), labels)] = float(m.group(4))
    return out


def total(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    """Sum of a metric over all label sets except per-position ones."""
    return sum(v for (n, _), v in samples.items() if n == name)


def spec_stats(text: str, prefix: str, source: str) -> SpecStats:
    samples = parse(text)
    positions: dict[int, float] = {}
    for (name, labels), value in samples.items():
        if name == f"{prefix}spec_decode_num_accepted_tokens_per_pos_total":
            pos = dict(labels).get("position")
            if pos is not None and pos.isdigit():
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
        resp = requests.get(url, headers=endpoint.headers(), timeout=timeout)
    except requests.RequestException as exc:
        raise BackendError(f"cannot read {url}: {exc}") from None
    if resp.status_code != 200:
        raise BackendError(f"{url} answered {resp.status_code}; is the metrics endpoint "
                           "enabled?")
    return resp.text
