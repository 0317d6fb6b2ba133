"""Whole requests as the client waits for them: the end-to-end speedup (the `latency`
objective), the time-to-first-token ratio, and tokens per wall second (`throughput`).

Outside load only lengthens a request. Per prompt (a conversation is one: its turns summed),
each side's time is a low quantile (LOW_Q) of its timings, each with the outside load it ran
beside taken out over its whole wall (lab.Timed.end_to_end). The workload's figure weighs each
category by the mix:

    latency speedup = sum_c w_c * mean_i(base_i) / sum_c w_c * mean_i(conf_i)

on the prompts both sides measured: exact on the work done (the same prompts, the same replies
at temperature 0), so noise can only lengthen a side. Its bootstrap interval resamples the
prompts within each category, paired (both sides of a drawn prompt go together), and each drawn
prompt's timings. `throughput`: each side's tokens over its time, the same way (prefill
included: at one request at a time, the latency figure weighed by reply length).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Literal

from specctl.orchestrator.measure.estimates.estimate import (
    BOOT,
    LOW_Q,
    Interval,
    Pairs,
    interval,
    quantile,
)
from specctl.orchestrator.measure.lab.servers import Timed

Figure = Literal["latency", "ttft", "throughput"]
_TIME: dict[str, Callable[[Timed], float]] = {
    "latency": lambda t: t.end_to_end, "throughput": lambda t: t.end_to_end,
    "ttft": lambda t: t.first_token}
Draw = Callable[[list[int]], list[int]]


def _sides(pairs: Pairs, cats: Mapping[int, str], weights: Mapping[str, float], figure: Figure,
           rng: random.Random | None) -> tuple[float, float, float, float]:
    """Weighted means over the prompts (drawn within each category where `rng`): the
    configuration's time, the baseline's, and their tokens."""
    by_cat: dict[str, list[int]] = {}
    for i in pairs:
        by_cat.setdefault(cats[i], []).append(i)
    of = _TIME[figure]
    mine = base = mine_n = base_n = 0.0
    for cat, ids in by_cat.items():
        w = weights.get(cat, 0.0)
        if w <= 0:
            continue
        drawn = rng.choices(ids, k=len(ids)) if rng else ids
        for i in drawn:
            ps = rng.choices(pairs[i], k=len(pairs[i])) if rng else pairs[i]
            mine += w * quantile([of(s) for s, _ in ps], LOW_Q) / len(ids)
            base += w * quantile([of(b) for _, b in ps], LOW_Q) / len(ids)
            mine_n += w * max(s.tokens for s, _ in ps) / len(ids)
            base_n += w * max(b.tokens for _, b in ps) / len(ids)
    return mine, base, mine_n, base_n


def _ratio(pairs: Pairs, cats: Mapping[int, str], weights: Mapping[str, float],
           figure: Figure, rng: random.Random | None = None) -> float:
    mine, base, mine_n, base_n = _sides(pairs, cats, weights, figure, rng)
    if figure == "throughput":
        return (mine_n / mine) / (base_n / base) if mine > 0 and base > 0 and base_n > 0 \
            else 0.0
    return base / mine if mine > 0 else 0.0


def figure_ratio(pairs: Pairs, cats: Mapping[int, str], weights: Mapping[str, float],
            figure: Figure, seed: int = 0, rounds: int = BOOT) -> Interval | None:
    """The configuration's figure over the baseline's with its bootstrap interval (None: no
    pairs, or no time measured: a server that reports no first token)."""
    if not pairs:
        return None
    point = _ratio(pairs, cats, weights, figure)
    if point <= 0:
        return None
    rng = random.Random(seed)
    values = [_ratio(pairs, cats, weights, figure, rng) for _ in range(rounds)]
    return interval(point, values, sum(len(ps) for ps in pairs.values()))


def relative(a: Pairs, b: Pairs, cats: Mapping[int, str], weights: Mapping[str, float],
             figure: Figure, seed: int = 0, rounds: int = BOOT) -> Interval | None:
    """a's figure over b's on the prompts both measured (the baseline cancels: each side's
    own times), with its bootstrap interval over the prompts, paired, and their timings."""
    common = [i for i in a if i in b]
    if not common:
        return None

    by_cat: dict[str, list[int]] = {}
    for i in common:
        by_cat.setdefault(cats[i], []).append(i)

    def ratio(rng: random.Random | None) -> float:
        picked = [i for ids in by_cat.values()
                  for i in (rng.choices(ids, k=len(ids)) if rng else ids)]
        keys = {n: cats[i] for n, i in enumerate(picked)}
        x = _sides(_as_pairs(a, picked, rng), keys, weights, figure, None)
        y = _sides(_as_pairs(b, picked, rng), keys, weights, figure, None)
        if figure == "throughput":
            return (x[2] / x[0]) / (y[2] / y[0]) if x[0] > 0 and y[0] > 0 and y[2] > 0 else 0.0
        return y[0] / x[0] if x[0] > 0 else 0.0

    point = ratio(None)
    if point <= 0:
        return None
    rng = random.Random(seed)
    values = [ratio(rng) for _ in range(rounds)]
    return interval(point, values, sum(len(a[i]) for i in common))


def _as_pairs(side: Pairs, picked: list[int], rng: random.Random | None) -> Pairs:
    """The drawn prompts (a prompt drawn twice counts twice: each draw a key of its own), each
    with its timings resampled where `rng`."""
    return {n: (rng.choices(side[i], k=len(side[i])) if rng else side[i])
            for n, i in enumerate(picked)}
