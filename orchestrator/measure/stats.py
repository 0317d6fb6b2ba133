"""Statistics for paired benchmark samples: medians of paired ratios, spread, bootstrap intervals.

Pure and deterministic (the bootstrap takes a seeded RNG), so the numbers in a report can be
recomputed from its raw samples.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specctl.orchestrator.measure import workload
from specctl.orchestrator.measure.workload import Request

NOISY_SPREAD = 0.25  # a 95% interval wider than 25% of the median is flagged as noisy


@dataclass(frozen=True)
class Summary:
    median: float
    low: float  # bootstrap 95% interval of the median
    high: float
    minimum: float
    maximum: float
    n: int

    @property
    def noisy(self) -> bool:
        return self.n < 3 or (self.high - self.low) > NOISY_SPREAD * self.median


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    if len(numerators) != len(denominators):
        raise ValueError("paired samples must have the same length")
    return [a / b for a, b in zip(numerators, denominators, strict=True) if b > 0]


def bootstrap_median(values: Sequence[float], rounds: int = 2000,
                     seed: int = 0) -> tuple[float, float]:
    if not values:
        raise ValueError("no samples")
    rng = random.Random(seed)
    n = len(values)
    medians = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(rounds))
    return medians[int(0.025 * rounds)], medians[min(rounds - 1, int(0.975 * rounds))]


def summarize(values: Sequence[float], seed: int = 0) -> Summary:
    low, high = bootstrap_median(values, seed=seed)
    return Summary(median=statistics.median(values), low=low, high=high,
                   minimum=min(values), maximum=max(values), n=len(values))


def summarize_throughput(pairs: Sequence[tuple[Request, Request]], weights: Mapping[str, float],
                         rounds: int = 2000, seed: int = 0) -> Summary:
    """The workload speedup of (speculative, baseline) request pairs, with a bootstrap 95%
    interval: pairs resampled within each category, so the mix stays the mix."""
    if not pairs:
        raise ValueError("no samples")
    point = workload.speedup([s for s, _ in pairs], [b for _, b in pairs], weights)
    by_cat: dict[str, list[tuple[Request, Request]]] = {}
    for pair in pairs:
        by_cat.setdefault(pair[0].category, []).append(pair)
    rng = random.Random(seed)
    values = []
    for _ in range(rounds):
        drawn = [p for ps in by_cat.values() for p in rng.choices(ps, k=len(ps))]
        values.append(workload.speedup([s for s, _ in drawn], [b for _, b in drawn], weights))
    values.sort()
    return Summary(median=point, low=values[int(0.025 * rounds)],
                   high=values[min(rounds - 1, int(0.975 * rounds))],
                   minimum=values[0], maximum=values[-1], n=len(pairs))
