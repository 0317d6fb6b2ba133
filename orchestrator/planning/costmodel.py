"""The speculative-decoding cost model (Leviathan et al. 2023, Theorem 3.8), with verification cost.

With acceptance rate a, draft/target step cost ratio c and draft length k:
  E(k) = (1 - a^(k+1)) / (1 - a)          expected tokens per verification step
  S(k) = E(k) / (k*c + v(k))              speedup over the target alone
where v(k) is the cost of verifying k+1 tokens in units of one target step (1 in the paper; more on
CPUs, Apple Ultra chips, or at batch > 1).

Measured speedups are medians over prompts, and acceptance differs a lot between prompts (a copy
task accepts nearly everything, free chat much less), so `curve_over_prompts` predicts each
prompt's curve from its own acceptance and takes the median, as the measurement does.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Verify = Callable[[float], float]  # v(k); k may be a mean draft length


def tokens_per_step(alpha: float, k: int) -> float:
    if not 0 <= alpha <= 1:
        raise ValueError("alpha must be in [0, 1]")
    if alpha == 1:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def modelled_speedup(alpha: float, c: float, k: int, verify: Verify = lambda _k: 1.0) -> float:
    if k == 0:
        return 1.0
    return tokens_per_step(alpha, k) / (k * c + verify(k))


@dataclass(frozen=True)
class Point:
    k: int
    tokens_per_step: float
    speedup: float


def curve(alpha: float, c: float, max_k: int = 16, verify: Verify = lambda _k: 1.0) -> list[Point]:
    return [Point(k, tokens_per_step(alpha, k), modelled_speedup(alpha, c, k, verify))
            for k in range(1, max_k + 1)]


def tokens_per_step_measured(accept_at: Sequence[float], alpha: float, k: int) -> float:
    """E(k) from measured per-position acceptance: accept_at[i] = P(at least i+1 draft tokens
    accepted), read off a probe that drafted len(accept_at) tokens each step. It needs no
    constant-alpha assumption (real acceptance mixes easy and hard text). Beyond the probe's
    length, positions decay by alpha."""
    known = list(accept_at[:k])
    last = known[-1] if known else 1.0
    extra = [last * alpha ** (j + 1) for j in range(k - len(known))]
    return 1.0 + sum(known) + sum(extra)


def curve_measured(accept_at: Sequence[float], alpha: float, c: float, max_k: int,
                   verify: Verify = lambda _k: 1.0) -> list[Point]:
    points = []
    for k in range(1, max_k + 1):
        e = tokens_per_step_measured(accept_at, alpha, k)
        points.append(Point(k, e, e / (k * c + verify(k))))
    return points


def curve_over_prompts(accept_at: Sequence[Sequence[float]], alpha: float, c: float, max_k: int,
                       verify: Verify = lambda _k: 1.0,
                       weights: Sequence[float] | None = None) -> list[Point]:
    """Per k, the prompts' E(k) and S(k) combined: without weights the median over prompts;
    with weights (each prompt's share of the baseline's decode time in the workload) the
    workload's speedup, sum(w) / sum(w / S_i): time saved where the time is spent."""
    curves = [curve_measured(acc, alpha, c, max_k, verify) for acc in accept_at]
    if weights is None:
        return [Point(k, statistics.median(cv[k - 1].tokens_per_step for cv in curves),
                      statistics.median(cv[k - 1].speedup for cv in curves))
                for k in range(1, max_k + 1)]
    total = sum(weights)
    return [Point(k, sum(w * cv[k - 1].tokens_per_step for w, cv in zip(weights, curves,
                                                                         strict=True)) / total,
                  total / sum(w / cv[k - 1].speedup for w, cv in zip(weights, curves,
                                                                      strict=True)))
            for k in range(1, max_k + 1)]


def best(points: Sequence[Point]) -> Point:
    """The point of highest predicted speedup, even when that is a slowdown (see `gain`)."""
    return max(points, key=lambda p: p.speedup)


def gain(points: Sequence[Point]) -> Point | None:
    """The best point when it predicts a speedup; None when every k is slower than the target
    alone (speculation should be off)."""
    top = best(points)
    return top if top.speedup > 1.0 else None


def linear_verify(samples: dict[int, float], fixed: float = 0.0) -> Verify:
    """v(k) from measured verification costs at some k; v(0) = 1 (the target's own step).

    Between measured points it is linear; beyond them the nearest segment's line goes on, so
    below the smallest k the fixed part the points show is kept (a speculative step costs more
    than its drafts and the target's pass: the drafter catches up on what was accepted). With
    one point there is no second to show that part: `fixed` (in target steps, e.g. one step of
    the draft, c, from the draft-alone timings) stands for it, and the slope takes the rest.
    Without the fixed part, a line from (0, 1) through v(8) had predicted 1.12-1.39x at k=1-2
    for 0.83-0.85x measured."""
    pts = sorted(samples.items())
    if not pts:
        return lambda k: 1.0 if k <= 0 else 1.0 + fixed
    if len(pts) == 1:
        (k1, v1), = pts
        base = 1.0 + max(0.0, min(fixed, v1 - 1.0))
        return lambda k: 1.0 if k <= 0 else base + (v1 - base) * k / k1

    def v(k: float) -> float:
        if k <= 0:
            return 1.0
        for (k0, v0), (k1, v1) in itertools.pairwise(pts):
            if k <= k1:
                return max(1.0, v0 + (v1 - v0) * (k - k0) / (k1 - k0))
        (k0, v0), (k1, v1) = pts[-2], pts[-1]
        return max(1.0, v1 + (v1 - v0) / (k1 - k0) * (k - k1))

    return v
