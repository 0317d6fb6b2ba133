"""The cost model's inputs as `specctl tune` holds them (acceptance by position per prompt, c,
v(k), each prompt's share of the workload's time), and alpha fitted to a mean accepted length."""

from __future__ import annotations

from dataclasses import dataclass, field

from specctl.orchestrator.planning import costmodel


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
        """The workload speedup predicted per k (time-weighted over prompts); v with a fixed
        part of one draft step (c) where only one draft length was timed."""
        weights = ([self.time_share.get(i, 0.0) for i in self.accept_at]
                   if self.time_share else None)
        return costmodel.curve_over_prompts(list(self.accept_at.values()), self.alpha, self.cost,
                                            max_k, costmodel.linear_verify(self.verify,
                                                                           self.cost), weights)
