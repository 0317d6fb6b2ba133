"""The primitives of the estimates (measure/intervals.py, measure/whole.py): a low quantile of
repeated timings, an interval, the paired timings they are computed from."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specctl.orchestrator.measure.lab import Timed

LOW_Q = 0.1  # the quantile of repeated timings taken as a configuration's time
CONFIDENCE = 0.95
BOOT = 300

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


def interval(point: float, values: list[float], n: int) -> Interval:
    """The point with the central CONFIDENCE share of its bootstrap values."""
    values.sort()
    tail = (1 - CONFIDENCE) / 2
    return Interval(point, quantile(values, tail), quantile(values, 1 - tail), n)
