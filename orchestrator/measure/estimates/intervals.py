"""Estimates that outside load cannot pull up, their intervals, and the physical bound, by
objective: `latency` (the default of tune and bench: each request's end-to-end time, as the
client waits for it), `throughput` (tokens per wall second) and the time to the first token
are whole requests (measure/estimates/whole.py); `decode`, the verification steps' time, is below.

Outside load only ever lengthens a request. So a configuration's decode time per token on a
prompt is taken as a low quantile of its repeated timings (LOW_Q), per verification step: at
temperature 0 the steps a prompt takes are exact (its tokens less the drafts accepted, from the
engine's counters), only their time is noisy, and each request's time counts with the outside
load it ran beside taken out (lab.LOADED: the CPU watch's cores, a share of speed each). The
speedup over the baseline is the workload's throughput (measure/prompts/workload.py) on those times
against the baseline's, on the prompts both measured in the same blocks, with a bootstrap
interval over the requests. Seeded: a report's figures can be recomputed from its samples.

A low quantile of fewer timings is slower: a configuration pooled by prompt (a routed one: a
pool of its repeats) has the baseline pooled by prompt too, and so has the configuration it is
compared with directly. Against the baseline pooled as one, a routed configuration measured
0.93x [0.88-0.98] of n-gram on cpu-demo where the requests' own throughput gave 1.06x. Pools
by category (a dozen timings or more) keep the baseline's one pool: their pull (about 3% where
requests vary by a third) offsets in part the opposite pull of pooling unlike steps, where a
category's cheapest steps set its time (test_tune's near ties went on a draft more often with
both pulled by category).

The physical bound: with the draft's step costing c target steps, no draft of length k can
yield more than k+1 tokens per (k*c + 1) target steps, so (k+1)/(k*c+1) is the most any
measurement may show (n-gram drafts cost nothing: k+1). A pair whose decode is above it is
noise on the baseline's side; it is discarded (whatever the objective), counted and said.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.measure.estimates import whole
from specctl.orchestrator.measure.estimates.estimate import (
    BOOT,
    CONFIDENCE,
    LOW_Q,
    Interval,
    Pairs,
    interval,
    quantile,
)
from specctl.orchestrator.measure.lab.servers import Timed
from specctl.orchestrator.measure.prompts import workload
from specctl.orchestrator.measure.prompts.workload import Figure as Figure
from specctl.orchestrator.measure.prompts.workload import Objective as Objective
from specctl.orchestrator.measure.prompts.workload import Timing

__all__ = ["BOOT", "CONFIDENCE", "LOW_Q", "Interval", "Pairs", "paired_speedup", "quantile",
           "relative"]
POOL = "all"
# how a configuration's step times are pooled: "steps", all prompts as one where its steps
# draft alike (_uniform; by category where not); "category"; "prompt", each prompt its own
# (several servers behind one configuration: a routed one sends a prompt always to the same
# server, and a category's prompts may go to servers whose steps cost unlike)
Pooling = Literal["steps", "category", "prompt"]


def bound(method: str, k: int, cost: float, chained: Sequence[int] = ()) -> float:
    """The most a speculative configuration can speed decoding up, by construction: k+1 tokens
    a step at best, and a draft model's k drafts cost k*c target steps on top of the step
    ((k+1)/(k*c+1)). Only a draft model pays c: n-gram methods, heads and chains (whose
    n-gram drafts are free; `chained`: the k of each method after the first) are held to k+1 of
    their longest draft."""
    longest = max(k, *chained) if chained else k
    if longest <= 0:
        return 1.0
    if method == "draft" and not chained:
        return (k + 1) / (k * cost + 1)
    return float(longest + 1)


def pair(samples: Sequence[Timed], label: str, baseline: str) -> Pairs:
    """Each of `label`'s timings with the baseline's on the same prompt in the same block (the
    calmest, where it was asked again after outside load)."""
    base: dict[tuple[int, int], Timed] = {}
    for t in samples:
        if t.label == baseline:
            seen = base.get((t.prompt, t.block))
            if seen is None or t.busy <= seen.busy:
                base[(t.prompt, t.block)] = t
    out: Pairs = {}
    for t in samples:
        if t.label == label and (t.prompt, t.block) in base:
            out.setdefault(t.prompt, []).append((t, base[(t.prompt, t.block)]))
    return out


def plausible(pairs: Pairs, limit: float) -> tuple[Pairs, int]:
    """The pairs whose own ratio is within the physical bound, and how many were not."""
    kept: Pairs = {}
    dropped = 0
    for i, ps in pairs.items():
        ok = [(s, b) for s, b in ps if b.per_token / s.per_token <= limit]
        dropped += len(ps) - len(ok)
        if ok:
            kept[i] = ok
    return kept, dropped


CALM = 0.5  # cores other processes used during a request, under which it ran undisturbed


def calm(pairs: Pairs) -> Pairs:
    """Per prompt, the pairs during which other processes used under CALM cores on both sides
    (the CPU watch saw them), where there is one; else all of them. Outside load only slows a
    request, and a seen burst is no measurement of the configuration."""
    out: Pairs = {}
    for i, ps in pairs.items():
        quiet = [(s, b) for s, b in ps if max(s.busy, b.busy) < CALM]
        out[i] = quiet or ps
    return out


def steps(t: Timed) -> int:
    """Verification steps of a request, exactly: each yields one token of the target's own
    plus the drafts it accepted (a baseline step yields one); only those its time covers
    (Timed.decoded: a server's decode time leaves out the first token, the prompt's)."""
    return max(1, t.decoded - t.spec.accepted)


def step_time(t: Timed) -> float:
    """A verification step's time, with the outside load the request ran beside taken out
    (Timed.quiet_s)."""
    return t.quiet_s / steps(t)


def _uniform(pairs: Pairs) -> bool:
    """Whether every prompt's steps draft alike (a plain draft of k: k a step), so a step costs
    the same on every prompt and all prompts' step times are one pool. Not so for p-min or
    n-gram, whose drafts per step follow the text: their steps are pooled by category."""
    per = [sorted(s.spec.drafted / steps(s) for s, _ in ps)[len(ps) // 2]
           for ps in pairs.values()]
    return max(per) - min(per) <= 0.1 * max(per) + 0.01


def _score(pairs: Pairs, keys: Mapping[int, tuple[str, str]], cats: Mapping[int, str],
           weights: Mapping[str, float], mine_t: Mapping[str, float],
           base_t: Mapping[str, float]) -> float:
    """Each prompt at its longest request's length: the configuration's steps per baseline step
    (the median over its pairs) times the baseline's steps, each side's at its pool's step time
    (`keys`: each prompt's pool on the configuration's side and on the baseline's)."""
    mine, base = [], []
    for i, ps in pairs.items():
        c = cats[i]
        per = sorted(steps(s) / steps(b) for s, b in ps)[len(ps) // 2]
        n = max(steps(b) for _, b in ps)
        tokens = max(b.tokens for _, b in ps)
        mine.append(Timing(c, tokens, per * n * mine_t[keys[i][0]]))
        base.append(Timing(c, tokens, n * base_t[keys[i][1]]))
    return workload.throughput_ratio(mine, base, weights)


def poolable(plan: Plan) -> Pooling:
    """How a configuration's step times may pool: as its steps draft (_uniform), never across
    categories for a chain, whose steps cost what the drafter that proposed costs."""
    return "category" if plan.chain else "steps"


def _pools(pairs: Pairs, cats: Mapping[int, str], pooling: Pooling = "steps",
           ) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[int, tuple[str, str]]]:
    """Step times of the configuration by pool (Pooling), of the baseline (one pool, or by
    prompt where the configuration's are), and each prompt's pools on both sides."""
    if pooling == "steps" and not _uniform(pairs):
        pooling = "category"
    keys = {i: ((POOL, POOL) if pooling == "steps" else (cats[i], POOL)
                if pooling == "category" else (f"#{i}", f"#{i}")) for i in pairs}
    mine: dict[str, list[float]] = {}
    base: dict[str, list[float]] = {}
    for i, ps in pairs.items():
        mine.setdefault(keys[i][0], []).extend(step_time(s) for s, _ in ps)
        base.setdefault(keys[i][1], []).extend(step_time(b) for _, b in ps)
    return mine, base, keys


def _times(side: dict[str, list[float]]) -> dict[str, float]:
    return {k: quantile(v, LOW_Q) for k, v in side.items()}


def _resampled(side: dict[str, list[float]], rng: random.Random) -> dict[str, list[float]]:
    return {c: rng.choices(v, k=len(v)) for c, v in side.items()}


def _weighed(pairs: Pairs, cats: Mapping[int, str], weights: Mapping[str, float],
             only: str | None) -> tuple[Pairs, Mapping[str, float]]:
    if only is not None:
        pairs = {i: ps for i, ps in pairs.items() if cats[i] == only}
        weights = {only: 1.0}
    return {i: ps for i, ps in pairs.items() if weights.get(cats[i], 0.0) > 0}, weights


def paired_speedup(pairs: Pairs, cats: Mapping[int, str], weights: Mapping[str, float],
            only: str | None = None, seed: int = 0, rounds: int = BOOT,
            poolable: Pooling = "steps", objective: Figure = "decode") -> Interval | None:
    """The workload speedup of the paired timings by `objective` with its bootstrap interval
    (None: no pairs). `only`: one category's. `latency`, `throughput` and `ttft` are whole
    requests as the client waits for them (measure/estimates/whole.py); `decode` the verification
    steps' (below).

    At temperature 0 a prompt's steps are exact (steps()); what noise moves is a step's time.
    Each side's step time is a low quantile of its requests' step times (all prompts pooled
    where steps draft alike, by category where not: _uniform), and each prompt takes its steps
    at that time. A longer context slows both sides' steps alike, so pooling prompts of unlike
    contexts moves both times and their ratio stays. The bootstrap resamples each pool."""
    pairs, weights = _weighed(pairs, cats, weights, only)
    if not pairs:
        return None
    if objective != "decode":
        return whole.figure_ratio(pairs, cats, weights, objective, seed, rounds)
    mine, base, keys = _pools(pairs, cats, poolable)
    point = _score(pairs, keys, cats, weights, _times(mine), _times(base))
    rng = random.Random(seed)
    values = [_score(pairs, keys, cats, weights, _times(_resampled(mine, rng)),
                     _times(_resampled(base, rng))) for _ in range(rounds)]
    return interval(point, values, sum(len(ps) for ps in pairs.values()))


def relative(a: Pairs, b: Pairs, cats: Mapping[int, str], weights: Mapping[str, float],
             only: str | None = None, seed: int = 0, rounds: int = BOOT,
             poolable: tuple[Pooling, Pooling] = ("steps", "steps"),
             objective: Figure = "decode") -> Interval | None:
    """a's workload speedup over b's by `objective`, with its bootstrap interval, on the
    prompts both measured (None: none); whole requests' as measure/estimates/whole.py compares them,
    decode's so: both are held to the same baseline, whose time then cancels: only the two
    configurations' step times are resampled. Two configurations are told apart far sooner so
    than by comparing their two intervals against the baseline, each carrying its noise. Where
    one is pooled by prompt, both are (pools of one size: a low quantile's pull is its pool's)."""
    a, weights = _weighed(a, cats, weights, only)
    common = [i for i in a if i in b]
    if not common:
        return None
    if objective != "decode":
        return whole.relative(a, b, cats, weights, objective, seed, rounds)
    a, b = {i: a[i] for i in common}, {i: b[i] for i in common}
    by_prompt = "prompt" in poolable
    mine_a, base, keys_a = _pools(a, cats, "prompt" if by_prompt else poolable[0])
    mine_b, _, keys_b = _pools(b, cats, "prompt" if by_prompt else poolable[1])
    base_t = _times(base)

    def ratio(x: dict[str, list[float]], y: dict[str, list[float]]) -> float:
        under = _score(b, keys_b, cats, weights, _times(y), base_t)
        return (_score(a, keys_a, cats, weights, _times(x), base_t) / under if under > 0
                else 0.0)

    rng = random.Random(seed)
    values = [ratio(_resampled(mine_a, rng), _resampled(mine_b, rng)) for _ in range(rounds)]
    return interval(ratio(mine_a, mine_b), values, sum(len(ps) for ps in a.values()))


def drift(samples: Sequence[Timed], baseline: str) -> float:
    """How far the baseline's own speed moved between blocks: the largest block's time per
    token over the smallest, less one (0: steady). Per block the median over its prompts of the
    time per token against that prompt's fastest."""
    fastest: dict[int, float] = {}
    for t in samples:
        if t.label == baseline:
            fastest[t.prompt] = min(fastest.get(t.prompt, math.inf), t.per_token)
    blocks: dict[int, list[float]] = {}
    for t in samples:
        if t.label == baseline:
            blocks.setdefault(t.block, []).append(t.per_token / fastest[t.prompt])
    levels = [quantile(v, 0.5) for v in blocks.values()]
    return max(levels) / min(levels) - 1 if len(levels) > 1 else 0.0


@dataclass(frozen=True)
class Noise:
    """What the rest of the machine did while we measured."""

    cores: float  # mean cores other processes used
    busy_share: float  # share of requests during which they used at least half a core

    def text(self) -> str:
        return (f"other processes used {self.cores:.1f} cores on average, at least half a core "
                f"during {self.busy_share:.0%} of the requests")


def noise(samples: Sequence[Timed]) -> Noise:
    if not samples:
        return Noise(0.0, 0.0)
    return Noise(sum(t.busy for t in samples) / len(samples),
                 sum(t.busy >= 0.5 for t in samples) / len(samples))
