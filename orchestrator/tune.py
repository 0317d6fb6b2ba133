"""`specctl tune`: choose k (and p-min, or n-gram, or off) from the cost model plus short runs.

1. Measure the target alone (baseline), the draft alone (its step cost c), and one long
   speculative run (k=8): its per-position acceptance gives E(k) for every k up to 8 (and alpha),
   its step time the verification cost v(k).
2. The cost model with those numbers ranks k; measure its best (or, when the probe was already
   its best, its runner-up): two k measured in all.
3. Screen the draftless n-gram method and a p-min at the best k on one prompt each; a screen that
   drafted and beat the best config on that prompt is measured on the other prompts too, and
   wins only on all of them.
4. The best measured wins, unless nothing beats the baseline by the margin: then "off".
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from specctl.adapters.base import Backend, Installed, SpecStats
from specctl.orchestrator import client, costmodel, servers, stats
from specctl.orchestrator.bench import load_suite
from specctl.orchestrator.errors import ProfileError
from specctl.orchestrator.plan import Method, Plan
from specctl.orchestrator.tuned import Measured, Result

MARGIN = 0.05
PROBE_K = 8
P_MIN_TRY = 0.5
Say = Callable[[str], None]


def tune_prompts() -> list[str]:
    """One prompt per category: chat, code, and a copy-heavy one (where n-gram can win)."""
    return [load_suite("code")[0], load_suite("chat")[0], load_suite("summarize")[1]]


@dataclass(frozen=True)
class Run:
    label: str
    plan: Plan
    tps: tuple[float, ...]
    spec: SpecStats
    seconds: float
    prompts: tuple[int, ...]  # which of the tune prompts were used, in order

    @property
    def median_tps(self) -> float:
        return statistics.median(self.tps)


class Measurer(Protocol):
    @property
    def say(self) -> Say: ...

    def run(self, plan: Plan, label: str, only: tuple[int, ...] | None = None) -> Run: ...


@dataclass(frozen=True)
class Bench:
    """How configurations are measured: the same prompts, one server at a time."""

    backend: Backend
    installed: Installed
    prompts: tuple[str, ...]
    max_tokens: int
    logs: Path
    say: Say = print

    def run(self, plan: Plan, label: str, only: tuple[int, ...] | None = None) -> Run:
        """Measure `plan` on the tune prompts (or only the ones at `only`)."""
        which = only if only is not None else tuple(range(len(self.prompts)))
        self.say(f"measuring {label}")
        start = time.monotonic()
        with servers.ephemeral(plan, self.backend, self.installed, self.logs,
                               f"tune-{label.replace(' ', '').replace('=', '')}") as srv:
            client.chat(srv.endpoint, "Hello", 4)  # warm-up, not counted
            before = self.backend.spec_stats(srv.endpoint) if plan.speculative else SpecStats()
            tps = tuple(client.chat(srv.endpoint, self.prompts[i], self.max_tokens).decode_tps
                        for i in which)
            after = self.backend.spec_stats(srv.endpoint) if plan.speculative else SpecStats()
        return Run(label, plan, tps, after - before, time.monotonic() - start, which)


def speedup(run: Run, baseline: Run) -> float:
    """Median of ratios paired by prompt with the baseline's run."""
    base = dict(zip(baseline.prompts, baseline.tps, strict=True))
    return stats.summarize(stats.paired_ratios(list(run.tps),
                                               [base[i] for i in run.prompts])).median


def _settle(runs: dict[int, Run], baseline: Run, bench: Measurer,
            margin: float) -> dict[int, Run]:
    """Two measured k within the margin of each other: measure both once more (in the other
    order) before choosing, rather than let one noisy run decide."""
    (k1, r1), (k2, r2) = runs.items()
    s1, s2 = speedup(r1, baseline), speedup(r2, baseline)
    if abs(s1 - s2) > margin * max(s1, s2):
        return runs
    again2 = bench.run(r2.plan, f"{r2.label} (again)")
    again1 = bench.run(r1.plan, f"{r1.label} (again)")
    return {k1: merge(r1, again1, r1.label), k2: merge(r2, again2, r2.label)}


def merge(a: Run, b: Run, label: str) -> Run:
    """One configuration measured in two parts, as one run."""
    return Run(label, a.plan, a.tps + b.tps, a.spec + b.spec, a.seconds + b.seconds,
               a.prompts + b.prompts)


def _tps_on(run: Run, prompt: int) -> float:
    return dict(zip(run.prompts, run.tps, strict=True))[prompt]


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
    alpha: float
    cost: float
    verify: dict[int, float]
    accept_at: tuple[float, ...]  # P(at least i+1 draft tokens accepted), per position


def acceptance_by_position(spec: SpecStats, k: int, alpha: float) -> tuple[float, ...]:
    """From the backend's per-position counters when it has them, else alpha^i."""
    if spec.drafts and len(spec.per_position) >= k:
        return tuple(round(spec.per_position[i] / spec.drafts, 4) for i in range(k))
    return tuple(round(alpha ** (i + 1), 4) for i in range(k))


def estimate(baseline: Run, draft_alone: Run, probe: Run) -> Estimates:
    """alpha from accepted tokens per step, c from step times, v(k) from the probe's step time."""
    k = probe.plan.k
    spec = probe.spec
    per_step = spec.mean_accepted_length or 0.0
    alpha = fit_alpha(per_step, k)
    same = dict(zip(baseline.prompts, baseline.tps, strict=True))
    t_target = 1 / statistics.median([same[i] for i in draft_alone.prompts])
    t_draft = 1 / draft_alone.median_tps
    step = (1 + per_step) / probe.median_tps
    verify = max(0.5, (step - k * t_draft) / t_target)
    return Estimates(alpha=alpha, cost=round(t_draft / t_target, 4), verify={k: round(verify, 3)},
                     accept_at=acceptance_by_position(spec, k, alpha))


def measured(run: Run, baseline: Run) -> Measured:
    return Measured(label=run.label, method=run.plan.method, k=run.plan.k, p_min=run.plan.p_min,
                    speedup=round(speedup(run, baseline), 4), tps=round(run.median_tps, 3),
                    acceptance=run.spec.acceptance_rate, seconds=round(run.seconds, 1))


def tune(plan: Plan, bench: Measurer, max_k: int = 8, margin: float = MARGIN) -> Result:
    if plan.method != "draft" or plan.draft is None:
        raise ProfileError(f"{plan.profile}: tune needs a draft model in the profile (it also "
                           "tries n-gram and p-min itself)")
    start = time.monotonic()
    baseline = bench.run(plan.baseline(), "baseline")
    draft_alone = bench.run(plan.baseline().but(target=plan.draft), "draft alone", only=(0,))
    # a long probe: its per-position acceptance gives E(k) for every shorter k directly
    probe_k = min(PROBE_K, max_k)
    runs = {probe_k: bench.run(plan.but(k=probe_k, p_min=None), f"draft k={probe_k}")}
    est = estimate(baseline, draft_alone, runs[probe_k])
    verify = costmodel.linear_verify({k: v for k, v in est.verify.items()})
    curve = costmodel.curve_measured(est.accept_at, est.alpha, est.cost, max_k, verify)
    ranked = sorted(curve, key=lambda p: p.speedup, reverse=True)
    bench.say(f"alpha {est.alpha:.2f}, c {est.cost:.2f}, v({probe_k}) {est.verify[probe_k]:.2f}: "
              f"the model ranks k = {', '.join(str(p.k) for p in ranked[:3])}")
    # the model's pick, or (when the probe already was it) its runner-up: two measured k,
    # measured again when they come out within the margin
    pick = next(p for p in ranked if p.k not in runs)
    runs[pick.k] = bench.run(plan.but(k=pick.k, p_min=None), f"draft k={pick.k}")
    runs = _settle(runs, baseline, bench, margin)
    results = [measured(r, baseline) for r in runs.values()]
    best = max(results, key=lambda m: m.speedup)
    # short screens on one prompt each, where the alternative is least likely to shine (a pass
    # there means something): n-gram on code (prompt 0), p-min on chat (prompt 1)
    extra = [bench.run(plan.but(method="ngram", draft=None, k=best.k), f"ngram k={best.k}",
                       only=(0,)),
             bench.run(plan.but(k=best.k, p_min=P_MIN_TRY), f"draft k={best.k} p-min {P_MIN_TRY}",
                       only=(1,))]
    results += [measured(r, baseline) for r in extra]
    winner = best
    for screen in extra:
        # promising on its prompt (it drafted, and beat the best config on that same prompt):
        # then it earns a full run on every prompt, and must win there
        if not screen.spec.drafted or screen.median_tps <= (1 + margin) * _tps_on(
                runs[best.k], screen.prompts[0]):
            continue
        rest = tuple(i for i in range(len(baseline.prompts)) if i not in screen.prompts)
        more = bench.run(screen.plan, f"{screen.label} (other prompts)", only=rest)
        full = measured(merge(screen, more, f"{screen.label} (all prompts)"), baseline)
        results.append(full)
        if full.speedup > winner.speedup * (1 + margin):
            winner = full
    predicted = [{"k": p.k, "tokens_per_step": round(p.tokens_per_step, 4),
                  "speedup": round(p.speedup, 4)} for p in curve]
    method: Method
    if winner.speedup < 1 + margin:
        method, k, p_min = "none", 0, None
        summary = (f"nothing beat the baseline by {margin:.0%} (best {winner.label} "
                   f"{winner.speedup:.2f}x): speculation off")
    else:
        method, k, p_min = winner.method, winner.k, winner.p_min
        summary = f"{winner.label} measured {winner.speedup:.2f}x over the baseline"
    return Result(profile=plan.profile, method=method, k=k, p_min=p_min,
                  speedup=winner.speedup if method != "none" else 1.0, summary=summary,
                  alpha=est.alpha, cost=est.cost, verify={str(k_): v for k_, v in
                                                          est.verify.items()},
                  baseline_tps=round(baseline.median_tps, 3), predicted=predicted,
                  measured=results, seconds=round(time.monotonic() - start, 1),
                  created=time.strftime("%Y-%m-%dT%H:%M:%S%z"))


def sweep(plan: Plan, bench: Measurer, ks: Sequence[int]) -> tuple[list[Measured], float, float]:
    """--exhaustive: every k measured the same way. Returns results, baseline tok/s, seconds."""
    start = time.monotonic()
    baseline = bench.run(plan.baseline(), "baseline")
    results = [measured(bench.run(plan.but(k=k, p_min=None), f"draft k={k}"), baseline)
               for k in ks]
    return results, baseline.median_tps, time.monotonic() - start
