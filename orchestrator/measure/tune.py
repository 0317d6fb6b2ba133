"""`specctl tune`: choose k (and p-min, or n-gram, or off) from the cost model on inputs noise
cannot move much, then confirm the choice end to end in paired trials.

1. Acceptance, exactly: the probe (k=8) once on each of the workload's prompts. At temperature
   0 each prompt's draft counters give its acceptance by position, the same every run: no
   repeat needed.
2. Costs, robustly: many short requests (SHORT_TOKENS) to the baseline, the draft alone and the
   probe, interleaved; outside load only lengthens a request, so each cost is a low quantile of
   its timings: c (the draft's step over the target's) and v(k) (a verification step of k
   drafts, in target steps). v is measured again at the model's favourite k when it is not the
   probe's (v need not be linear), up to three points, while this fixed work has used less
   than half the budget (on a busy machine it can use all of it, and the trials get none).
3. The cost model predicts every k's workload speedup (fit.Estimates); its best is the pick.
4. Paired trials (race.py): the pick, n-gram, where the backend has them ngram-mod alone
   and the pick chained with ngram-mod (copy-heavy work: code edits), and a p-min at the
   pick's k (not run when the cost model's bound says it cannot win) against the baseline,
   block after block on the same
   prompts, until the leader's 95% interval is within the precision or the budget is spent
   (the whole tune's: a challenger whose first block no longer fits is not measured, and said). A
   challenger leads only when its interval says it beats the pick by the margin; it is dropped
   when its interval says it cannot.
5. A category counts as slowed only when its interval's top is under GUARD; then a p-min and a
   shorter k are tried, and the best that slows none and pays wins.
6. "off" when the best's interval says it cannot beat the baseline by the margin ("decided"),
   or when it is not shown to: speculation takes over only when its measured point beats the
   baseline by the margin and either its interval's bottom is over 1 or the cost model
   predicts that it pays by the margin too (a near-tie stays with the baseline: on a flat curve
   which k measured best is noise).

Every figure is held to the physical bound (k+1)/(k*c+1) for the c measured here (n-gram: k+1):
pairs above it are discarded as noise and counted; an estimate above it is flagged and cannot
win. When the precision is not reached in the budget the result says so in one line (what ran
beside, what to do) and is not to be saved.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace

from specctl.orchestrator.errors import ProfileError
from specctl.orchestrator.measure import engine, intervals
from specctl.orchestrator.measure.costs import Costs
from specctl.orchestrator.measure.fit import Estimates, fit_alpha
from specctl.orchestrator.measure.intervals import LOW_Q, Interval, quantile
from specctl.orchestrator.measure.lab import Config, Lab, Timed
from specctl.orchestrator.measure.race import MIN_BLOCKS, Entry, Race
from specctl.orchestrator.measure.trials import Bench, Measurer, measured, speedup
from specctl.orchestrator.measure.tuned import Measured, Result, bound_flag, chain_of
from specctl.orchestrator.planning import costmodel
from specctl.orchestrator.planning.plan import Method, Plan, Step

MARGIN = engine.MARGIN
PROBE_K = 8
P_MIN_TRY = 0.5
SHORT_K = 2
GUARD = 0.98  # a category is slowed when its interval's top is under this
PRECISION = 0.05  # the headline's interval half-width to reach
BUDGET = 240.0  # seconds of tune, by default
MAX_VERIFY_POINTS = 3
FIXED_SHARE = 0.5  # v is measured again only while acceptance and costs used less of the budget
NGRAM_MOD_K = 16  # ngram-mod's longest draft: a found n-gram continues for many tokens


def _label(plan: Plan) -> str:
    chained = "".join(f" + {s.describe()}" for s in plan.chain)
    if plan.method != "draft":
        return Step(plan.method, plan.k).describe() + chained
    return (f"draft k={plan.k}" + (f" p-min {plan.p_min}" if plan.p_min is not None else "")
            + chained)


def _bound(plan: Plan, cost: float) -> float:
    """The physical bound of a plan (intervals.bound), its chained methods included."""
    return intervals.bound(plan.method, plan.k, cost, tuple(s.k for s in plan.chain))


def _acceptance(samples: Sequence[Timed], label: str, k: int) -> dict[int, tuple[float, ...]]:
    """Per prompt: P(at least j+1 drafts accepted), j < k, from the draft counters."""
    out = {}
    for t in samples:
        if t.label != label:
            continue
        s = t.spec
        if s.drafts and len(s.per_position) >= k:
            out[t.prompt] = tuple(s.per_position[j] / s.drafts for j in range(k))
        else:
            a = fit_alpha(s.mean_accepted_length or 0.0, k)
            out[t.prompt] = tuple(a ** (j + 1) for j in range(k))
    return out


def _shares(lab: Lab, tokens: dict[int, int]) -> dict[int, float]:
    """Each prompt's share of the baseline's decode time in the workload (time per token is the
    target's own, the same for every prompt)."""
    cats = [p.category for p in lab.workload.prompts]
    weights = lab.workload.weights()
    return {i: weights.get(cats[i], 0.0) / cats.count(cats[i]) * n for i, n in tokens.items()}


def _p_min_hopeless(est: Estimates, k: int, pick: float, margin: float) -> tuple[bool, float]:
    """Whether a p-min at k cannot beat the pick by the margin, by the cost model's bound (it
    drafts, at best, only what is accepted); and that bound."""
    verify = costmodel.linear_verify(est.verify)
    total = num = 0.0
    for i, acc in est.accept_at.items():
        e = costmodel.tokens_per_step_measured(acc, est.alpha, k)
        s = e / (k * est.cost + verify(k)) * costmodel.stop_early_gain(e, k, est.cost, verify)
        w = est.time_share.get(i, 1.0)
        total, num = total + w, num + w / s
    best = total / num if num > 0 else 0.0
    return best <= pick * (1 + margin), best


def tune(plan: Plan, lab: Lab, max_k: int = 8, margin: float = MARGIN, max_tokens: int = 64,
         precision: float = PRECISION, budget: float = BUDGET,
         sequential: bool = False, methods: frozenset[str] = frozenset(),
         chains: bool = False) -> Result:
    """`methods`, `chains`: what the installed backend has beyond draft, n-gram and p-min
    (ngram-mod; several methods at once)."""
    if plan.method != "draft" or plan.draft is None:
        raise ProfileError(f"{plan.profile}: tune needs a draft model in the profile (it also "
                           "tries n-gram and p-min itself)")
    started, wall = lab.clock(), time.monotonic()
    probe_k = min(PROBE_K, max_k)
    base: Config = ("baseline", plan.baseline())
    alone: Config = ("draft alone", plan.baseline().but(target=plan.draft))
    probe_plan = plan.but(k=probe_k, p_min=None)
    probe_cfg: Config = (_label(probe_plan), probe_plan)
    seq = sequential or not lab.fits([base[1], probe_plan])
    if seq:
        lab.say("one server at a time (sequential blocks): "
                + ("--sequential" if sequential else "two servers do not fit in memory"))
    race = Race(lab, base, max_tokens, seq, margin, precision, started + budget)
    probe = Entry(probe_cfg[0], probe_cfg, math.inf)
    lab.keep([probe_cfg])  # 1. exact acceptance per prompt: one request each, full length
    first = [replace(lab.ask(probe.label, i, max_tokens), block=-1)  # pairs with nothing
             for i in range(len(lab.workload.prompts))]
    accept = _acceptance(first, probe.label, probe_k)
    tokens = {t.prompt: t.tokens for t in first}  # lossless: the baseline's are the same
    costs = Costs(lab, base, seq)  # 2. costs from short timings
    costs.time([alone, probe_cfg])
    costs.fit(alone[0], probe_cfg)
    total = sum((t.spec for t in first), start=type(first[0].spec)())
    est = Estimates(alpha=fit_alpha(total.mean_accepted_length or 0.0, probe_k),
                    cost=round(costs.cost, 4), verify=dict(costs.verify), accept_at=accept,
                    time_share=_shares(lab, tokens))
    curve = est.curve(max_k)  # 3. predict; v again at the favourite when new
    unmeasured: list[str] = []
    while True:
        pick_k = costmodel.best(curve).k
        if pick_k in costs.verify or len(costs.verify) >= MAX_VERIFY_POINTS:
            break
        if lab.clock() - started > budget * FIXED_SHARE:  # the trials need the rest
            unmeasured.append(f"v({pick_k}): not measured: acceptance and costs used "
                              f"{lab.clock() - started:.0f} s of the {budget:.0f} s budget; "
                              "the model takes v as linear from the points measured")
            lab.say(unmeasured[-1])
            break
        cfg = (_label(plan.but(k=pick_k, p_min=None)), plan.but(k=pick_k, p_min=None))
        costs.time([cfg])
        costs.add(cfg)
        est = Estimates(est.alpha, est.cost, dict(costs.verify), accept, est.time_share)
        curve = est.curve(max_k)
    predicted = {p.k: p.speedup for p in curve}
    lab.say(f"alpha {est.alpha:.2f}, c {est.cost:.3f}, v "
            + ", ".join(f"({k}) {v:.2f}" for k, v in sorted(est.verify.items()))
            + f": the model predicts k={pick_k} {predicted[pick_k]:.2f}x")
    for e in (probe,):  # its bound, now that c is known
        e.bound = intervals.bound("draft", probe_k, est.cost)
    entries, skipped = _candidates(plan, est, pick_k, probe, probe_k, predicted[pick_k],
                                   margin, methods, chains)
    skipped = unmeasured + skipped
    race.expect = _expect(costs, base[0], tokens, entries, predicted[pick_k])
    lead = race.run(entries)  # 4. paired trials
    cats = race.categories(lead)
    slowed = {c: iv for c, iv in cats.items() if iv.high < GUARD}
    kept: Entry | None = lead
    if slowed and lead.interval is not None and lead.interval.point > 1 + margin:
        kept = _guard(plan, lab, race, lead, slowed, entries, budget, margin, est.cost)  # 5.
    rows = [_row(race, e) for e in entries if e.interval is not None]
    skipped += [f"{e.label}: {e.dropped}" for e in entries if e.interval is None and e.dropped]
    if probe not in entries:  # the probe as the short requests measured it
        shadow = replace(race, samples=[*first, *costs.samples])
        shadow.judge(probe)
        rows.insert(0, _row(shadow, probe, " (short requests)"))
    return _result(plan, lab, race, lead, kept, slowed, est, curve, rows, skipped, margin,
                   precision, budget, seq, time.monotonic() - wall, lab.clock() - started)


def _expect(costs: Costs, baseline: str, tokens: dict[int, int], entries: Sequence[Entry],
            predicted: float) -> dict[str, float]:
    """The expected seconds of a full-length request, by label, as the machine is now (median
    timings, not the low quantile the costs take): the baseline's, and each candidate's at the
    pick's predicted speed (a challenger is there to beat it; the race will tell)."""
    mine = [t for t in costs.samples if t.label == baseline]
    if not mine or not tokens:
        return {}
    length = sum(tokens.values()) / len(tokens)
    decode = length * quantile([t.per_token for t in mine], 0.5)
    overhead = quantile([max(0.0, t.wall_s - t.seconds) for t in mine], 0.5)
    out = {baseline: decode + overhead}
    for e in entries:
        out[e.label] = decode / max(predicted, 1.0) + overhead
    return out


def _candidates(plan: Plan, est: Estimates, k: int, probe: Entry, probe_k: int,
                predicted: float, margin: float, methods: frozenset[str] = frozenset(),
                chains: bool = False) -> tuple[list[Entry], list[str]]:
    """The pick, n-gram at the probe's k (its drafts cost nothing to make), ngram-mod alone and
    the pick chained with ngram-mod where the backend has them (`methods`, `chains`), and a
    p-min at the pick's k unless the cost model's bound says it cannot win; and what was not
    run, why."""
    cost = est.cost
    pick_plan = plan.but(k=k, p_min=None)
    pick = probe if k == probe_k else Entry(_label(pick_plan), (_label(pick_plan), pick_plan),
                                            intervals.bound("draft", k, cost))
    ngram_plan = plan.but(method="ngram", draft=None, k=probe_k, p_min=None)
    out = [pick, Entry(_label(ngram_plan), (_label(ngram_plan), ngram_plan),
                       intervals.bound("ngram", probe_k, cost))]
    if "ngram-mod" in methods:
        mod = Step("ngram-mod", NGRAM_MOD_K)
        alone = plan.but(method="ngram-mod", draft=None, k=mod.k, p_min=None, chain=())
        out.append(Entry(_label(alone), (_label(alone), alone), _bound(alone, cost)))
        if chains:
            both = pick_plan.but(chain=(mod,))
            out.append(Entry(_label(both), (_label(both), both), _bound(both, cost)))
    skipped = []
    hopeless, best = _p_min_hopeless(est, k, predicted, margin)
    p_plan = plan.but(k=k, p_min=P_MIN_TRY)
    if hopeless:
        skipped.append(f"{_label(p_plan)}: not run; by the cost model it reaches at most "
                       f"{best:.2f}x and needs over {predicted * (1 + margin):.2f}x")
    else:
        out.append(Entry(_label(p_plan), (_label(p_plan), p_plan),
                         intervals.bound("draft", k, cost)))
    return out, skipped


def _guard(plan: Plan, lab: Lab, race: Race, lead: Entry, slowed: dict[str, Interval],
           entries: list[Entry], budget: float, margin: float, cost: float) -> Entry | None:
    """The lead slows a category down (by its interval): a p-min at its k and a shorter k are
    measured too; the best that slows none and pays wins (None: none does)."""
    lab.say(f"{lead.label} slows " + ", ".join(f"{c} ({iv.text()})" for c, iv in slowed.items())
            + ": trying what keeps every category")
    seen = {e.label for e in entries}
    k = lead.config[1].k
    extra = []
    for cand in (lead.config[1].but(p_min=P_MIN_TRY),
                 plan.but(k=SHORT_K if k > SHORT_K else max(1, k - 1), p_min=None)):
        if cand.method == "draft" and _label(cand) not in seen:
            extra.append(Entry(_label(cand), (_label(cand), cand),
                               intervals.bound("draft", cand.k, cost)))
            seen.add(_label(cand))
    race.deadline = max(race.deadline, lab.clock() + budget / 3)
    if extra:
        race.run(extra)
        entries += extra
    fair = []
    for e in entries:
        if e.interval is None or e.drafted == 0 or e.blocks < MIN_BLOCKS \
                or e.interval.point > e.bound:
            continue
        if e.interval.point > 1 + margin and all(iv.high >= GUARD for iv in
                                                  race.categories(e).values()):
            fair.append(e)
    return max(fair, key=lambda e: e.interval.point if e.interval else 0.0) if fair else None


def _row(race: Race, e: Entry, note: str = "") -> Measured:
    plan = e.config[1]
    iv = e.interval or Interval(0.0, 0.0, 0.0)
    mine = [t for t in race.samples if t.label == e.label]
    spec = sum((t.spec for t in mine), start=type(mine[0].spec)()) if mine else None
    tps = sorted(t.tokens / t.seconds for t in mine if t.seconds > 0)
    cats = {c: round(v.point, 4) for c, v in race.categories(e).items()}
    flag = f"dropped: {e.dropped}" if e.dropped else ""
    if e.discarded:
        flag = (flag + "; " if flag else "") + (f"{e.discarded} pair(s) above the bound "
                                                "discarded as noise")
    label = e.label + (note or (f" ({e.blocks} block{'s' if e.blocks > 1 else ''})"
                                if e.dropped else ""))
    limit = round(e.bound, 4) if math.isfinite(e.bound) else None
    return Measured(
        label=label, method=plan.method, k=plan.k, p_min=plan.p_min, chain=chain_of(plan.chain),
        speedup=round(iv.point, 4), low=round(iv.low, 4), high=round(iv.high, 4),
        tps=round(tps[len(tps) // 2], 3) if tps else 0.0,
        acceptance=spec.acceptance_rate if spec else None, categories=cats, bound=limit,
        flag=bound_flag(limit, {"speedup": round(iv.point, 4), "interval top":
                                round(iv.high, 4), **cats}, flag))


def _result(plan: Plan, lab: Lab, race: Race, lead: Entry, kept: Entry | None,
            slowed: dict[str, Interval], est: Estimates, curve: list[costmodel.Point],
            rows: list[Measured], skipped: list[str], margin: float, precision: float,
            budget: float, seq: bool, seconds: float, spent: float) -> Result:
    top = kept or lead
    iv = top.interval or Interval(0.0, 0.0, 0.0)
    cats = race.categories(top)
    drift = race.drift()
    noise = intervals.noise(race.samples)
    seen = f"{noise.text()}; the baseline drifted {drift:.0%} between blocks"
    if lab.restarts:
        seen += f"; {lab.restarts} restart(s) of servers that remember earlier requests"
    settled = race.stopped in ("precision", "decided")
    method: Method
    if kept is None:
        method, k, p_min = "none", 0, None
        summary = (f"{lead.label} measured {iv.text()} but slows "
                   + ", ".join(f"{c} to {v.text()}" for c, v in slowed.items())
                   + "; nothing that keeps every category pays: speculation off")
    elif iv.high < 1 + margin:
        method, k, p_min = "none", 0, None
        summary = (f"nothing beats the baseline by {margin:.0%} (best {top.label} "
                   f"{iv.text()}): speculation off")
    elif not _pays(iv, margin, model := _predicted(top, curve)):
        method, k, p_min = "none", 0, None
        summary = (f"nothing is shown to beat the baseline by {margin:.0%} (best {top.label} "
                   f"{iv.text()}: it needs a point over {1 + margin:.2f}x and a bottom over "
                   "1.00x" + (f" or the cost model's agreement, which predicts {model:.2f}x"
                              if model is not None else "") + "): speculation off")
    else:
        tp = top.config[1]
        method, k, p_min = tp.method, tp.k, tp.p_min
        summary = (f"{top.label} measured {iv.text()} over the baseline ("
                   + ", ".join(f"{c} {v.point:.2f}x" for c, v in cats.items()) + ")")
    if settled:
        summary += f"; {race.stopped} reached (±{iv.half_width:.0%})"
    else:
        summary += (f"; precision ±{precision:.0%} not reached in {spent:.0f} s (budget "
                    f"{budget:.0f} s; ±"
                    f"{iv.half_width:.0%}): {seen}; close what runs beside or pass --budget "
                    f"{max(2 * budget / 60, 5):.0f}m")
    if seq:
        summary += f"; one server at a time, the baseline drifted {drift:.0%} between blocks"
    chain = chain_of(top.config[1].chain) if method != "none" else []
    return Result(profile=plan.profile, method=method, k=k, p_min=p_min, chain=chain,
                  speedup=round(iv.point, 4) if method != "none" else 1.0,
                  low=round(iv.low, 4) if method != "none" else None,
                  high=round(iv.high, 4) if method != "none" else None,
                  summary=summary[:2000],
                  categories={c: round(v.point, 4) for c, v in cats.items()}
                  if method != "none" else {},
                  alpha=est.alpha, cost=est.cost,
                  verify={str(k_): round(v, 3) for k_, v in est.verify.items()},
                  baseline_tps=round(1 / quantile([t.per_token for t in race.samples
                                                   if t.label == "baseline"], LOW_Q), 3),
                  predicted=[{"k": p.k, "tokens_per_step": round(p.tokens_per_step, 4),
                              "speedup": round(p.speedup, 4)} for p in curve],
                  measured=rows, skipped=skipped, seconds=round(seconds, 1),
                  created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), settled=settled,
                  stopped=race.stopped, noise=seen[:1000], sequential=seq)


def _pays(iv: Interval, margin: float, predicted: float | None) -> bool:
    """Whether speculation takes over from the baseline: its measured point beats it by the
    margin, and either its interval's bottom is above it (surely faster, as a challenger takes
    the lead in the race) or the cost model, from inputs noise cannot move much, predicts that
    it pays by the margin too. A near-tie stays with the baseline: where no
    k pays, which k measured best is noise, and a tune that turned a different one on each
    time would contradict itself."""
    if iv.point <= 1 + margin:
        return False
    return iv.low > 1 or (predicted is not None and predicted > 1 + margin)


def _predicted(e: Entry, curve: Sequence[costmodel.Point]) -> float | None:
    """The cost model's speedup for a plain draft configuration (it models nothing else)."""
    plan = e.config[1]
    if plan.method != "draft" or plan.p_min is not None or plan.chain:
        return None
    return next((p.speedup for p in curve if p.k == plan.k), None)


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
