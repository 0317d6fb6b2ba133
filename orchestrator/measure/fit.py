"""What `specctl tune` reads off its trials: the cost model's inputs (acceptance by position per
prompt, c, v(k)), the cost model's bound on p-min, and how much of a reply an n-gram drafter could
copy."""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from specctl.adapters.base import SpecStats
from specctl.orchestrator.measure.trials import Run, ratios
from specctl.orchestrator.planning import costmodel

WORD = re.compile(r"\w+|[^\w\s]")  # a word or one punctuation mark


def copy_share(prompt: str, reply: str, n: int = 3) -> float:
    """The share of the reply's word n-grams already seen earlier (in the prompt or the reply):
    what an n-gram drafter can find to propose."""
    words = WORD.findall(reply)
    seen = set(_ngrams(WORD.findall(prompt), n))
    hits = 0
    for gram in _ngrams(words, n):
        hits += gram in seen
        seen.add(gram)
    return hits / max(len(words) - n + 1, 1)


def _ngrams(words: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(words[j:j + n]) for j in range(len(words) - n + 1)]


def fit_alpha(accepted_per_step: float, k: int) -> float:
    """Solve E[accepted] = a(1 - a^k)/(1 - a) for a (bisection; the mean is increasing in a)."""
    target = min(max(accepted_per_step, 0.0), k - 1e-9)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        mean = costmodel.tokens_per_step(mid, k) - 1
        lo, hi = (mid, hi) if mean < target else (lo, mid)
    return round((lo + hi) / 2, 4)


@dataclass(frozen=True)
class Estimates:
    alpha: float  # over all prompts
    cost: float
    verify: dict[int, float]
    accept_at: dict[int, tuple[float, ...]]  # per prompt: P(at least j+1 draft tokens accepted)
    time_share: dict[int, float] = field(default_factory=dict)  # per prompt: workload weight

    def curve(self, max_k: int) -> list[costmodel.Point]:
        """The workload speedup predicted per k (time-weighted over prompts)."""
        weights = ([self.time_share.get(i, 0.0) for i in self.accept_at]
                   if self.time_share else None)
        return costmodel.curve_over_prompts(list(self.accept_at.values()), self.alpha, self.cost,
                                            max_k, costmodel.linear_verify(self.verify), weights)


def acceptance_by_position(spec: SpecStats, k: int) -> tuple[float, ...]:
    """From the backend's per-position counters when it has them, else alpha^i."""
    if spec.drafts and len(spec.per_position) >= k:
        return tuple(round(spec.per_position[i] / spec.drafts, 4) for i in range(k))
    alpha = fit_alpha(spec.mean_accepted_length or 0.0, k)
    return tuple(round(alpha ** (i + 1), 4) for i in range(k))


def estimate(baseline: Run, draft_alone: Run, probe: Run) -> Estimates:
    """c from step times, per prompt acceptance by position, and v(k) from the probe's step time
    (in target steps: (1 + accepted per step) / speedup - k*c), the median over prompts."""
    k = probe.plan.k
    base = dict(zip(baseline.prompts, baseline.tps, strict=True))
    cost = statistics.median(base[i] for i in draft_alone.prompts) / draft_alone.median_tps
    per_step = {i: s.mean_accepted_length or 0.0 for i, s in zip(probe.prompts, probe.specs,
                                                                   strict=True)}
    steps = [(1 + per_step[i]) / r - k * cost for i, r in ratios(probe, baseline).items()]
    return Estimates(alpha=fit_alpha(probe.spec.mean_accepted_length or 0.0, k),
                     cost=round(cost, 4), verify={k: round(max(0.5, statistics.median(steps)), 3)},
                     accept_at={i: acceptance_by_position(s, k)
                                for i, s in zip(probe.prompts, probe.specs, strict=True)},
                     time_share=time_shares(baseline))


def time_shares(baseline: Run) -> dict[int, float]:
    """Each prompt's share of the workload's baseline decode time: its category's weight over
    the category's prompts, times its own time."""
    requests = baseline.requests()
    weights = dict(baseline.weights) or {"all": 1.0}
    count: dict[str, int] = {}
    for r in requests.values():
        count[r.category] = count.get(r.category, 0) + 1
    return {i: weights.get(r.category, 0.0) / count[r.category] * r.seconds
            for i, r in requests.items()}


def stop_early_bounds(best: Run, baseline: Run, est: Estimates) -> dict[int, float]:
    """Per prompt, the most a p-min at best's k can reach by the cost model (see
    costmodel.stop_early_gain), from what best accepted on that prompt."""
    verify = costmodel.linear_verify(est.verify)
    got = ratios(best, baseline)
    return {i: got[i] * costmodel.stop_early_gain(1 + (s.mean_accepted_length or 0.0),
                                                  best.plan.k, est.cost, verify)
            for i, s in zip(best.prompts, best.specs, strict=True) if i in got}
