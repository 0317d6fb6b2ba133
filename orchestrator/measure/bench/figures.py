"""A bench row's figures from paired timings (intervals.Pairs): the objective's speedup (the
row's `speedup`, what the verdict and the comparisons read) and beside it, each with its 95%
interval, the end-to-end speedup (`e2e_*`: what the client waited for), the time-to-first-token
ratio (`ttft_*`: the baseline's time to the first token over the configuration's; under 1.00x
the first token comes later) and the decode speedup (`decode_*`: the verification steps',
held to the physical bound); and the end-to-end speedup by prompt length (workload.BUCKETS, from the
prompt tokens the server counted), where speculation stops paying."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specctl.orchestrator.measure.estimates import estimate, intervals
from specctl.orchestrator.measure.estimates.intervals import (
    Figure,
    Interval,
    Objective,
    Pairs,
    Pooling,
)
from specctl.orchestrator.measure.lab.servers import Timed
from specctl.orchestrator.measure.prompts.workload import BUCKETS
from specctl.orchestrator.measure.results.tuned import bound_flag

BESIDE: tuple[tuple[Figure, str, str], ...] = (
    ("latency", "e2e_speedup", "e2e"), ("ttft", "ttft_ratio", "ttft"),
    ("decode", "decode_speedup", "decode"))  # figure, its key, its interval's prefix


def _span(key: str, prefix: str, got: Interval) -> dict[str, float]:
    return {key: got.point, f"{prefix}_low": got.low, f"{prefix}_high": got.high}


def row(timed: Pairs, cats: Mapping[int, str], weights: Mapping[str, float],
        limit: float | None, poolable: Pooling, objective: Objective) -> dict[str, Any]:
    """The figures of one configuration's paired timings: pairs whose decode is above the
    physical bound are discarded and counted, a decode figure above it is flagged (never
    reported bare)."""
    kept, dropped = intervals.plausible(timed, limit) if limit else (timed, 0)
    out: dict[str, Any] = {"bound": limit, "discarded": dropped}
    found: dict[str, Interval] = {}
    for figure, key, prefix in BESIDE:
        got = intervals.paired_speedup(kept, cats, weights, poolable=poolable, objective=figure)
        if got is not None:
            found[figure] = got
            out |= _span(key, prefix, got)
    main = found.get("decode") if objective == "decode" else intervals.paired_speedup(
        kept, cats, weights, poolable=poolable, objective=objective)
    if main is None:
        return out
    ratios = [_ratio(s, b, objective) for ps in kept.values() for s, b in ps]
    out |= {"speedup": main.point, "speedup_low": main.low, "speedup_high": main.high,
            "speedup_min": min(ratios), "speedup_max": max(ratios),
            "noisy": main.n < 3 or (main.high - main.low) > estimate.NOISY_SPREAD * main.point}
    decode = found.get("decode")
    flag = bound_flag(limit, {"decode speedup": decode.point, "interval top": decode.high}
                      if decode else {})
    return out | ({"implausible": flag} if flag else {})


def _ratio(s: Timed, b: Timed, objective: Objective) -> float:
    """One pair's own ratio by the objective (the range a row shows)."""
    if objective == "decode":
        return b.per_token / s.per_token
    if objective == "throughput":
        return (s.tokens / s.end_to_end) / (b.tokens / b.end_to_end)
    return b.end_to_end / s.end_to_end


def buckets(timed: Pairs, cats: Mapping[int, str], weights: Mapping[str, float]
            ) -> list[dict[str, Any]]:
    """The end-to-end speedup of the prompts in each length bucket (by the baseline's prompt
    tokens; a conversation's: its last turn's, all of it), the categories weighted by the mix
    within it; buckets with no prompt left out, none where the server counted no prompt
    tokens."""
    size = {i: max(b.prompt_tokens for _, b in ps) for i, ps in timed.items()}
    if not any(size.values()):
        return []
    out = []
    for low, high, name in BUCKETS:
        mine = {i: ps for i, ps in timed.items() if low <= size[i] < high}
        got = intervals.paired_speedup(mine, cats, weights, objective="latency") if mine else None
        if got is not None:
            out.append({"bucket": name, "prompts": len(mine), **_span(
                "e2e_speedup", "e2e", got)})
    return out
