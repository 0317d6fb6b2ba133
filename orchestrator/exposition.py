"""Samples read from a Prometheus text exposition (an engine's `/metrics`, the gateway's), with
prometheus_client's own parser: the one reader, for the adapters and for `status`."""

from __future__ import annotations

import math

from specctl.orchestrator.errors import BackendError

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """(sample name, sorted labels) -> value (label values may hold any character, `}`
    included). Text it cannot parse is a BackendError."""
    from prometheus_client.parser import text_string_to_metric_families

    out: Samples = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                value = float(sample.value)
                if math.isfinite(value):  # +Inf, NaN (an empty summary's quantiles): no count
                    out[(sample.name, tuple(sorted(sample.labels.items())))] = value
    except (ValueError, TypeError, IndexError) as exc:
        raise BackendError(f"the metrics page is not Prometheus text ({exc})") from None
    return out


def total(samples: Samples, name: str) -> float:
    """Sum of a metric over all its label sets."""
    return sum(v for (n, _), v in samples.items() if n == name)
