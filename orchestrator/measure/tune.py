"""`specctl tune`: choose k (and p-min, or n-gram, or off) from the cost model plus short runs.

1. Measure the target alone (baseline), the draft alone (its step cost c), and one long
   speculative run (k=8): each prompt's per-position acceptance gives its E(k) for every k up to
   8, the step times give the verification cost v(k).
2. The model predicts each prompt's speedup per k and ranks k by the workload's throughput (the
   measured statistic). Measure its best k, or its runner-up when the probe already was the best;
   when the two measured k are far apart, also the k between them (their geometric mean: the
   model's v(k) comes from one probe and can misplace the peak). Within the margin measurements
   cannot tell k apart, so another k replaces the incumbent only when better by the margin.
3. Try the draftless n-gram method (at the probe's k: its drafts cost nothing to make; the
   prompts whose baseline replies copy least go first), where the backend has them ngram-mod
   alone and the best draft chained with ngram-mod (copy-heavy work: code edits), and a p-min
   at the best k (not run when the cost model's bound shows it cannot win). They must beat the
   best by the margin to win.
4. The winner must keep every category of the workload at least at the baseline's speed (by
   GUARD, the noise): if it slows one down (chat, typically, where drafts are often rejected), a
   p-min at its k and a shorter k are measured too, and the best run that keeps every category
   wins instead.
5. Nothing beats the baseline by the margin: "off".

The score throughout is the workload's throughput against the baseline's (measure/workload.py:
the categories weighted by the mix), and the cost model ranks k by the same score, each prompt
weighted by its share of the baseline's time.

A run that cannot win stops early: after each prompt, the prompts not yet measured are put at
their best case (any speed; for p-min, the cost model's bound) and the run gives up once even
that cannot lift its median above what it has to beat. Winners are always measured in full.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace

from specctl.orchestrator.errors import ProfileError
from specctl.orchestrator.measure import engine
from specctl.orchestrator.measure.fit import Estimates, copy_share, estimate, stop_early_bounds
from specctl.orchestrator.measure.trials import (
    Bench,
    Measurer,
    Run,
    best_case,
    cannot_beat,
    category_speedups,
    measured,
    order,
    speedup,
)
from specctl.orchestrator.measure.tuned import Measured, Result
from specctl.orchestrator.planning.plan import Method, Plan, Step

MARGIN = engine.MARGIN
PROBE_K = 8
NGRAM_MOD_K = 16  # ngram-mod's longest draft: a found n-gram continues for many tokens
P_MIN_TRY = 0.5
SHORT_K = 2
GUARD = 0.98  # a category may lose at most 2% (noise) to the baseline


def between(plan: Plan, bench: Measurer, baseline: Run, runs: list[Run], best: Run,
            margin: float) -> tuple[Run | None, Run]:
    """When the two k measured are far apart (the model's pick and the probe), the k between
    them (their geometric mean): the model's v(k) comes from one probe and can misplace the
    peak. It must beat the best so far by the margin. Returns its run (None if not run) and the
    better."""
    ks = sorted(r.plan.k for r in runs if r.plan.method == "draft" and r.plan.p_min is None)
    if len(ks) < 2 or ks[-1] - ks[0] <= 2:
        return None, best
    mid = round(math.sqrt(ks[0] * ks[-1]))
    if mid in ks:
        return None, best
    need = speedup(best, baseline) * (1 + margin)
    run = bench.run(plan.but(k=mid, p_min=None), f"draft k={mid}", order(best),
                    cannot_beat(baseline, need))
    return run, run if run.complete and speedup(run, baseline) > need else best


def keeps_every_category(run: Run, baseline: Run) -> bool:
    return all(v >= GUARD for v in category_speedups(run, baseline).values())


def guarded(plan: Plan, bench: Measurer, baseline: Run, runs: list[Run], winner: Run,
            margin: float) -> tuple[list[Run], Run | None]:
    """The winner, or, when it slows a category down, the best run that does not (after
    measuring a p-min at its k and a shorter k, if not measured yet); None: none does."""
    if speedup(winner, baseline) <= 1 + margin or keeps_every_category(winner, baseline):
        return [], winner  # it wins and keeps every category, or it is off anyway
    slow = {c: v for c, v in category_speedups(winner, baseline).items() if v < GUARD}
    bench.say(f"{winner.label} slows {', '.join(f'{c} ({v:.2f}x)' for c, v in slow.items())}: "
              "trying what keeps every category")
    seen = {(r.plan.method, r.plan.k, r.plan.p_min) for r in runs}
    extra = []
    for candidate, label in ((winner.plan.but(p_min=P_MIN_TRY),
                              f"draft k={winner.plan.k} p-min {P_MIN_TRY}"),
                             (winner.plan.but(k=SHORT_K, p_min=None), f"draft k={SHORT_K}")):
        if candidate.method == "draft" and (candidate.method, candidate.k,
                                            candidate.p_min) not in seen:
            extra.append(bench.run(candidate, label))
    fair = [r for r in [*runs, *extra] if r.complete and r.spec.drafted
            and keeps_every_category(r, baseline) and speedup(r, baseline) > 1 + margin]
    return extra, max(fair, key=lambda r: speedup(r, baseline)) if fair else None


def second_k(plan: Plan, bench: Measurer, baseline: Run, probe: Run, ranked: Sequence[int],
             margin: float) -> tuple[Run, Run]:
    """Measure the model's favourite (or its runner-up, when the probe was the favourite).
    Returns that run and the better of the two."""
    favourite = ranked[0]
    other = favourite if favourite != probe.plan.k else ranked[1]
    at_probe = speedup(probe, baseline)
    need = at_probe / (1 + margin) if other == favourite else at_probe * (1 + margin)
    run = bench.run(plan.but(k=other, p_min=None), f"draft k={other}", order(probe),
                    cannot_beat(baseline, need))
    return run, run if run.complete and speedup(run, baseline) > need else probe


def alternatives(plan: Plan, bench: Measurer, baseline: Run, best: Run, est: Estimates,
                 ngram_k: int, margin: float, methods: frozenset[str] = frozenset(),
                 chains: bool = False) -> tuple[list[Run], Run, list[str]]:
    """n-gram, ngram-mod and the best draft chained with ngram-mod (where the backend has
    them: `methods`, `chains`), and a p-min at best's k; each must beat the best so far by the
    margin. Returns their runs, the winner, and what was not run because the cost model says it
    cannot win."""
    k = best.plan.k
    copies = {i: -copy_share(bench.prompts[i], text)  # the least copying first: likeliest loss
              for i, text in zip(baseline.prompts, baseline.texts, strict=True)}
    bounds = stop_early_bounds(best, baseline, est)
    runs, skipped, winner = [], [], best
    mod = Step("ngram-mod", NGRAM_MOD_K)
    candidates = [
        (plan.but(method="ngram", draft=None, k=ngram_k, p_min=None), f"ngram k={ngram_k}",
         {}, copies),
        *([(plan.but(method="ngram-mod", draft=None, k=mod.k, p_min=None, chain=()),
            mod.describe(), {}, copies)] if "ngram-mod" in methods else []),
        *([(best.plan.but(p_min=None, chain=(mod,)), f"draft k={k} + {mod.describe()}", {},
            copies)] if chains and "ngram-mod" in methods else []),
        (best.plan.but(p_min=P_MIN_TRY), f"draft k={k} p-min {P_MIN_TRY}", bounds, bounds)]
    for candidate, label, bound, rank in candidates:
        need = max(speedup(winner, baseline), 1.0) * (1 + margin)
        hopeless = cannot_beat(baseline, need, bound)
        unmeasured = replace(baseline, label=label, plan=candidate, prompts=(), tps=(),
                             specs=(), tokens=(), texts=())
        if bound and hopeless(unmeasured):
            skipped.append(f"{label}: not run; by the cost model it reaches at most "
                           f"{best_case(unmeasured, baseline, bound):.2f}x and needs over "
                           f"{need:.2f}x")
            continue
        run = bench.run(candidate, label, order(best, rank), hopeless)
        runs.append(run)
        # a configuration that drafted nothing is the baseline plus noise: it cannot win
        if run.complete and run.spec.drafted and speedup(run, baseline) > need:
            winner = run
    return runs, winner, skipped


def tune(plan: Plan, bench: Measurer, max_k: int = 8, margin: float = MARGIN,
         methods: frozenset[str] = frozenset(), chains: bool = False) -> Result:
    """`methods`, `chains`: what the installed backend has beyond draft, n-gram and p-min."""
    if plan.method != "draft" or plan.draft is None:
        raise ProfileError(f"{plan.profile}: tune needs a draft model in the profile (it also "
                           "tries n-gram and p-min itself)")
    start = time.monotonic()
    baseline = bench.run(plan.baseline(), "baseline")
    draft_alone = bench.run(plan.baseline().but(target=plan.draft), "draft alone", (0,))
    probe_k = min(PROBE_K, max_k)
    probe = bench.run(plan.but(k=probe_k, p_min=None), f"draft k={probe_k}")
    est = estimate(baseline, draft_alone, probe)
    curve = est.curve(max_k)
    ranked = [p.k for p in sorted(curve, key=lambda p: p.speedup, reverse=True)]
    bench.say(f"alpha {est.alpha:.2f}, c {est.cost:.2f}, v({probe_k}) {est.verify[probe_k]:.2f}: "
              f"the model ranks k = {', '.join(str(k) for k in ranked[:3])}")
    runs, best = [probe], probe
    if len(ranked) > 1:
        second, best = second_k(plan, bench, baseline, probe, ranked, margin)
        runs.append(second)
        third, best = between(plan, bench, baseline, runs, best, margin)
        runs += [third] if third is not None else []
    screens, winner, skipped = alternatives(plan, bench, baseline, best, est, probe_k, margin,
                                            methods, chains)
    runs += screens
    extra, kept = guarded(plan, bench, baseline, runs, winner, margin)
    runs += extra
    top = measured(kept or winner, baseline)
    method: Method
    chain = top.chain
    if kept is None:
        method, k, p_min = "none", 0, None
        summary = (f"{top.label} measured {top.speedup:.2f}x but slows "
                   + ", ".join(f"{c} to {v:.2f}x" for c, v in top.categories.items()
                               if v < GUARD)
                   + "; nothing that keeps every category pays: speculation off")
    elif top.speedup < 1 + margin:
        method, k, p_min = "none", 0, None
        summary = (f"nothing beat the baseline by {margin:.0%} (best {top.label} "
                   f"{top.speedup:.2f}x): speculation off")
    else:
        method, k, p_min = top.method, top.k, top.p_min
        cats = ", ".join(f"{c} {v:.2f}x" for c, v in top.categories.items())
        summary = f"{top.label} measured {top.speedup:.2f}x over the baseline ({cats})"
    return Result(profile=plan.profile, method=method, k=k, p_min=p_min,
                  chain=chain if method != "none" else [],
                  speedup=top.speedup if method != "none" else 1.0, summary=summary,
                  categories=top.categories if method != "none" else {},
                  alpha=est.alpha, cost=est.cost,
                  verify={str(k_): v for k_, v in est.verify.items()},
                  baseline_tps=round(baseline.median_tps, 3),
                  predicted=[{"k": p.k, "tokens_per_step": round(p.tokens_per_step, 4),
                              "speedup": round(p.speedup, 4)} for p in curve],
                  measured=[measured(r, baseline) for r in runs], skipped=skipped,
                  seconds=round(time.monotonic() - start, 1),
                  created=time.strftime("%Y-%m-%dT%H:%M:%S%z"))


def schedule(plan: Plan, bench: Bench, levels: Sequence[int], ks: Sequence[int],
             margin: float = MARGIN) -> tuple[tuple[tuple[int, int, int], ...], list[str]]:
    """k by batch size, for backends that switch k per batch: each k (and the baseline) on one
    server at every level; per level the best k that beats the baseline there by the margin
    (0: none does). Returns inclusive (first, last, k) ranges from 1 (the last level's k carries
    on beyond it, as vLLM does) and a line per level."""
    base = bench.at_levels(plan.baseline(), "baseline", levels)
    runs = {k: bench.at_levels(plan.but(k=k, p_min=None), f"draft k={k}", levels) for k in ks}
    picks, lines = [], []
    for level in levels:
        scores = {k: speedup(runs[k][level], base[level]) for k in ks}
        k, best = max(scores.items(), key=lambda kv: kv[1])
        chosen = k if best > 1 + margin else 0
        picks.append(chosen)
        lines.append(f"{level} concurrent: " + ", ".join(f"k={k_} {v:.2f}x" for k_, v in
                                                         scores.items()) + f" -> k={chosen}")
    ranges: list[tuple[int, int, int]] = []
    for n, (level, k) in enumerate(zip(levels, picks, strict=True)):
        last = levels[n + 1] - 1 if n + 1 < len(levels) else level
        if ranges and ranges[-1][2] == k:
            ranges[-1] = (ranges[-1][0], last, k)
        else:
            ranges.append((1 if not ranges else level, last, k))
    return tuple(ranges), lines


def sweep(plan: Plan, bench: Measurer, ks: Sequence[int]) -> tuple[list[Measured], float, float]:
    """--exhaustive: every k measured in full. Returns results, baseline tok/s, seconds."""
    start = time.monotonic()
    baseline = bench.run(plan.baseline(), "baseline")
    results = [measured(bench.run(plan.but(k=k, p_min=None), f"draft k={k}"), baseline)
               for k in ks]
    return results, baseline.median_tps, time.monotonic() - start
