"""Statistics for paired benchmark samples: medians of paired ratios, spread, bootstrap intervals.

Pure and deterministic (the bootstrap takes a seeded RNG), so the numbers in a report can be
recomputed from its raw samples.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

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
