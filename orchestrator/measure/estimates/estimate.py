"""The primitives of the estimates (measure/estimates/intervals.py, whole.py): a low quantile
of repeated timings, an interval, the paired timings they are computed from, how many paired
requests an interval needs (MIN_REQUESTS) and how a figure with fewer is said; and the median
of paired ratios with its bootstrap interval (`summarize`: bench's rounds at several streams).

Pure and deterministic (a bootstrap takes a seeded RNG), so the numbers in a report can be
recomputed from its raw samples."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from specctl.orchestrator.measure.lab.servers import Timed

LOW_Q = 0.1  # the quantile of repeated timings taken as a configuration's time
CONFIDENCE = 0.95
BOOT = 300
MIN_REQUESTS = 3  # paired requests of a kind an interval (and so a precision) needs: a bootstrap
# over one request is that request (a default tune saved "1.18x [1.18-1.18] ... provisional:
# ±0%" from one code request: issue 59), over two it draws one of three values
_COUNTED = {0: "no request", 1: "one request", 2: "two requests"}

Pairs = dict[int, list[tuple[Timed, Timed]]]  # prompt -> (configuration's, baseline's) by block


def quantile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (q=0: the minimum)."""
    if not values:
        raise ValueError("no samples")
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Interval:
    point: float
    low: float
    high: float
    n: int = 0  # pairs behind it

    @property
    def half_width(self) -> float:
        """Half the interval's width, relative to the point."""
        return (self.high - self.low) / 2 / self.point if self.point > 0 else math.inf

    def text(self) -> str:
        return f"{self.point:.2f}x [{self.low:.2f}-{self.high:.2f}]"


def backed(requests: int | None) -> bool:
    """Whether a figure on `requests` paired requests (of the kind with the fewest) may carry an
    interval; None: a figure saved before requests were counted, as it was saved."""
    return requests is None or requests >= MIN_REQUESTS


def no_interval(requests: int) -> str:
    """Why a figure has no interval: 'one request: no interval'."""
    return f"{_COUNTED.get(requests, f'{requests} requests')}: no interval"


def shown(point: float, low: float | None, high: float | None, requests: int | None) -> str:
    """A speedup as printed: '1.18x [1.10-1.25]' with its interval, '1.18x (one request: no
    interval)' on fewer than MIN_REQUESTS paired requests, '1.18x' where it has none saved."""
    if not backed(requests):
        return f"{point:.2f}x ({no_interval(requests or 0)})"
    return f"{point:.2f}x" + (f" [{low:.2f}-{high:.2f}]" if low is not None and high is not None
                              else "")


def interval(point: float, values: list[float], n: int) -> Interval:
    """The point with the central CONFIDENCE share of its bootstrap values."""
    values.sort()
    tail = (1 - CONFIDENCE) / 2
    return Interval(point, quantile(values, tail), quantile(values, 1 - tail), n)


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
