"""`specctl tune`: race every configuration the installed engine has against the baseline, in
one paired race, within the budget, and always leave a decision.

1. c, cheaply: the draft alone and the baseline, short requests on one prompt of each category
   (at most FIXED_SHARE of the budget): c is the draft's time per token over the target's, for
   the physical bound and the cost model's fixed part.
2. Breadth first (race.breadth): every kind of the workload with the baseline and the
   incumbent (the setting the plan serves now, a saved tune's pick, or the cost model's
   guess), one prompt of each, before any other candidate. A kind the budget has no room for
   is said and has no winner: it is served as before (no draft), never by a pick measured on
   another kind (the result's `unmeasured`).
3. The race (race.py), every candidate in the first block where it fits (the others wait for
   the next): the draft at the cost model's k, n-gram and where the build has them ngram-mod
   at the engine's own copying length (NGRAM_MOD_COPY_K) and the draft chained with
   ngram-mod, the draft at 2 and max-k (the step times at both ends), ngram-mod's short drafts
   alone, and a p-min at the cost model's k. Every request is full length (a short reply's
   speedup is not a long one's); each block asks as many prompts as fit in part of the time
   left (race.SHARE), one of each category or more; losers leave by paired intervals against
   the leader (successive elimination), and the blocks after go on with the other prompts.
   When it ends, the best of those still in it against the leader, on the prompts both
   measured, wins (the leader on a tie).
4. After the first block, the cost model from the race's own counters and step timings: the
   longest draft's per-position acceptance per prompt (exact at temperature 0: a shorter draft
   is its prefix), each measured draft length's step time in target steps (v(k) = step - k*c,
   linear between, its fixed part kept), each prompt's share of the workload's time. Its
   favourite k joins the race when it is not measured yet.
5. The pick never surely slows a category: where the race's pick has an interval wholly
   below 1.00x on one (race.slows), a p-min and a shorter k are measured too while the budget
   lasts, and the best measured that slows none and pays wins (race.fair), else "off"; the
   result lists each configuration refused so, with the category and its interval there.
6. Always a decision: the best measured configuration, with its interval, "settled" (the
   precision reached, or "off" decided: no interval's top reaches the baseline plus the margin)
   or "provisional" (the budget ran out first). No figure has an interval or a precision from
   fewer than MIN_REQUESTS paired requests of a kind: it says "one request: no interval" (or
   two), is saved without low and high, and is not surely faster. `up` serves a saved setting
   only when its interval's bottom is above 1.00x. Each measured category's winner is kept
   with the result, and
   what each measured setting cost a request (its prefill per prompt token, its decode per
   answer token by category, each category's answers: measure/route/costs.py) for the route.

Every figure is held to the physical bound (k+1)/(k*c+1) of a draft model for the c measured
here (n-gram methods and chains: k+1 of the longest draft): pairs above it are discarded as noise
and counted; an estimate above it is flagged and cannot win.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from specctl.orchestrator.contract.plan import Method, Plan, Step
from specctl.orchestrator.errors import ProfileError
from specctl.orchestrator.measure.estimates import intervals
from specctl.orchestrator.measure.estimates.estimate import backed, no_interval, shown
from specctl.orchestrator.measure.estimates.intervals import LOW_Q, Interval, quantile
from specctl.orchestrator.measure.estimates.step_costs import StepCosts, shortest
from specctl.orchestrator.measure.lab import engine
from specctl.orchestrator.measure.lab.servers import Config, Lab, Timed
from specctl.orchestrator.measure.results.tuned import (
    Measured,
    OnCategory,
    Refused,
    Result,
    Winner,
    bound_flag,
    chain_of,
)
from specctl.orchestrator.measure.route import costs as speeds
from specctl.orchestrator.measure.tune.fit import Estimates, fit_alpha
from specctl.orchestrator.measure.tune.race import SHARE, Contender, Race
from specctl.orchestrator.measure.tune.sweep import Measurer, Sweep, measured, run_ratio
from specctl.orchestrator.planning import costmodel

MARGIN = engine.MARGIN
P_MIN_TRY = 0.5
SHORT_K = 2
PRECISION = 0.05  # the headline's interval half-width to reach
BUDGET = 240.0  # seconds of tune, by default
FIXED_SHARE = 0.15  # the most of the budget the draft-alone timings may take
FIXED_REQUESTS = 2  # short requests of the draft alone (and the baseline) at least, one a
# prompt and round: c is a low quantile of them (a decode cost: the same on every kind)
NGRAM_K = 8  # n-gram's draft length: its drafts cost nothing to make
NGRAM_MOD_K = 16  # ngram-mod's longest draft: a found n-gram continues for many tokens
NGRAM_MOD_COPY_K = 64  # ngram-mod at the engine's own lengths (llama-server --spec-default:
# n-max 64, drafting only where 48 tokens are found): whole files copied back, as coding agents
# ask (issue 60: 2.20x end to end over no draft on whole-file edits, where k=16 drafts a line)


def _label(plan: Plan) -> str:
    chained = "".join(f" + {s.describe()}" for s in plan.chain)
    if plan.method != "draft":
        return Step(plan.method, plan.k).describe() + chained
    return (f"draft k={plan.k}" + (f" p-min {plan.p_min}" if plan.p_min is not None else "")
            + chained)


def _entry(plan: Plan, cost: float = 0.0) -> Contender:
    """A candidate with the physical bound for c (0 until c is measured: k+1)."""
    label = _label(plan)
    return Contender(label, (label, plan), intervals.bound(plan.method, plan.k, cost,
                                                       tuple(s.k for s in plan.chain)))


def _acceptance(samples: Sequence[Timed], label: str, k: int) -> dict[int, tuple[float, ...]]:
    """Per prompt: P(at least j+1 drafts accepted), j < k, from the draft counters (all of the
    prompt's requests together)."""
    out = {}
    for i in sorted({t.prompt for t in samples if t.label == label}):
        s = sum((t.spec for t in samples if t.label == label and t.prompt == i),
                start=type(samples[0].spec)())
        if s.drafts and len(s.per_position) >= k:
            out[i] = tuple(s.per_position[j] / s.drafts for j in range(k))
        else:
            a = fit_alpha(s.mean_accepted_length or 0.0, k)
            out[i] = tuple(a ** (j + 1) for j in range(k))
    return out


def _shares(lab: Lab, tokens: dict[int, int]) -> dict[int, float]:
    """Each prompt's share of the baseline's decode time in the workload (time per token is the
    target's own, the same for every prompt)."""
    cats = [p.category for p in lab.workload.prompts]
    weights = lab.workload.weights()
    return {i: weights.get(cats[i], 0.0) / cats.count(cats[i]) * n for i, n in tokens.items()}


def _candidates(plan: Plan, k0: int, max_k: int, methods: frozenset[str],
                chains: bool) -> list[Contender]:
    """Every configuration the build has, the cost model's pick first (it leads until beaten),
    the methods next (they differ most between workloads): n-gram and, where the build has
    them, ngram-mod at the engine's own copying length and the draft at k0 chained with
    ngram-mod; then the draft at 2 and at max-k, ngram-mod's short drafts alone, a p-min at k0
    (the last wait for a later block where the first is full)."""
    pick = plan.but(k=k0, p_min=None)
    mod = Step("ngram-mod", NGRAM_MOD_K)
    has_mod = "ngram-mod" in methods
    plans = [pick, plan.but(method="ngram", draft=None, k=min(NGRAM_K, max(max_k, 1)),
                            p_min=None, chain=())]
    if has_mod:
        plans.append(plan.but(method="ngram-mod", draft=None, k=NGRAM_MOD_COPY_K, p_min=None,
                              chain=()))
    if has_mod and chains:
        plans.append(pick.but(chain=(mod,)))
    plans += [plan.but(k=k, p_min=None) for k in dict.fromkeys((min(SHORT_K, max_k), max_k))
              if k != k0]
    if has_mod:
        plans.append(plan.but(method="ngram-mod", draft=None, k=mod.k, p_min=None, chain=()))
    plans.append(plan.but(k=k0, p_min=P_MIN_TRY))
    return [_entry(p) for p in plans]


def _join_model(plan: Plan, lab: Lab, race: Race, entries: list[Contender], lead: Contender,
                cost: float, max_k: int) -> tuple[Estimates | None, list[costmodel.Point]]:
    """The cost model fitted on the first block, and its curve; the k it predicts fastest
    joins the race (appended to `entries`) when no plain draft entry has it and it beats the
    leader's point estimate."""
    est = _model(lab, race, entries, cost, max_k)
    curve = est.curve(max_k) if est else []
    if est is not None and not race.stopped:
        fav = costmodel.best(curve)
        if fav.k not in {e.config[1].k for e in entries if _plain(e)} \
                and fav.speedup > _point(lead):
            entries.append(_entry(plan.but(k=fav.k, p_min=None), cost))
            lab.say(f"the cost model from the first block predicts draft k={fav.k} "
                    f"{fav.speedup:.2f}x: it joins the race")
    return est, curve


def _left(lab: Lab, deadline: float) -> str:
    return f"{max(0.0, deadline - lab.clock()):.0f} s left"


def tune(plan: Plan, lab: Lab, max_k: int = 8, margin: float = MARGIN, max_tokens: int = 64,
         precision: float = PRECISION, budget: float = BUDGET,
         sequential: bool = False, methods: frozenset[str] = frozenset(),
         chains: bool = False, reserve: float = 0.0,
         objective: intervals.Objective = "latency", incumbent: Plan | None = None) -> Result:
    """`methods`, `chains`: what the installed backend has beyond draft, n-gram and p-min
    (ngram-mod; several methods at once). `reserve`: seconds of the budget kept for what runs
    after the race (tune's sampling check). `objective`: what it ranks by (intervals).
    `incumbent`: the setting served now (a saved tune's speculating pick), which leads and is
    measured on every kind first; None: the cost model's pick."""
    if plan.method != "draft" or plan.draft is None:
        raise ProfileError(f"{plan.profile}: tune needs a draft model in the profile (it also "
                           "tries n-gram and p-min itself)")
    started, wall = lab.clock(), time.monotonic()
    deadline = started + max(budget - reserve, budget / 2)
    base: Config = ("baseline", plan.baseline())
    alone: Config = ("draft alone", plan.baseline().but(target=plan.draft))
    k0 = min(max(plan.k, SHORT_K), max_k) if max_k >= SHORT_K else max_k
    entries = _candidates(plan, k0, max_k, methods, chains)
    if incumbent is not None and incumbent.speculative:
        now = _entry(incumbent)
        entries = [now, *(e for e in entries if e.label != now.label)]
    seq = sequential or not lab.fits([base[1], entries[0].config[1]])
    if seq:
        lab.say("one server at a time (sequential blocks): "
                + ("--sequential" if sequential else "two servers do not fit in memory"))
    lab.say(f"timing the draft alone against the target (c); {_left(lab, deadline)}")
    costs = StepCosts(lab, base, seq)  # 1. c from short timings
    costs.time([alone], prompts=_timing(lab), least=FIXED_REQUESTS,
               until=started + budget * FIXED_SHARE, per_prompt=1)
    cost = round(costs.per_token(alone[0]) / costs.per_token(base[0]), 4)
    entries = [_entry(e.config[1], cost) for e in entries]
    race = Race(lab, base, max_tokens, seq, margin, precision, deadline, prior=costs.samples,
                start_s=_start_s(lab, costs, started), objective=objective)
    lead = entries[0]
    lab.say(f"breadth first: the baseline and {lead.label} on one prompt of each of the "
            f"{race.kinds} kinds, about {race.cost([lead], race.kinds):.0f} s; "
            + _left(lab, deadline))
    race.breadth(lead)  # 2. every kind with the incumbent, before any other candidate
    if not race.stopped:
        first = race.fitting(entries, (deadline - lab.clock()) * SHARE, race.kinds)
        lab.say(f"first block: {len(entries)} candidates and the baseline on {first} "
                f"prompt(s), {race.tokens or max_tokens} tokens a request, about "
                f"{race.cost(entries, first):.0f} s; " + _left(lab, deadline))
        lead = race.run(entries, blocks=1)  # 3. every candidate in the first block
    est, curve = _join_model(plan, lab, race, entries, lead, cost, max_k)  # 4.
    if not race.stopped:
        lab.say(f"next blocks: {sum(1 for e in entries if not e.dropped)} still in the "
                f"race; {_left(lab, deadline)}")
        lead = race.run(entries, leader=lead)
    lead = race.final(entries, lead)
    slowed = race.slows(lead)
    kept: Contender | None = lead
    if slowed and _point(lead) > 1 + margin:  # (one that does not pay is not served anyway)
        kept = _guard(plan, lab, race, lead, slowed, entries, cost)  # 5.
    race.unmeasured(entries)
    rows = [_row(race, e) for e in entries if e.interval is not None]
    skipped = [f"{e.label}: {e.dropped}" for e in entries if e.interval is None and e.dropped]
    refused = _refused(race, [e for e in entries if e is not kept])
    result = _result(plan, lab, race, lead, kept, refused, entries, est, curve,
                     rows, skipped, margin, precision, budget, seq, time.monotonic() - wall,
                     lab.clock() - started)
    return result.model_copy(update=speeds.fitted(  # the route's cost model (speeds.py)
        race.samples, [base, *(e.config for e in entries)], lab.workload,
        race.tokens or max_tokens))


def _plain(e: Contender) -> bool:
    p = e.config[1]
    return p.method == "draft" and p.p_min is None and not p.chain


def _point(e: Contender) -> float:
    return e.interval.point if e.interval else 0.0


def _timing(lab: Lab) -> list[int]:
    """The prompts that time c: the shortest of each kind (step_costs.shortest), the
    FIXED_REQUESTS shortest of them. Where the model answers at its own length (160 tokens
    whatever max_tokens asks), one short request a kind took 40 s of a 240 s tune."""
    best = shortest(lab.workload)
    size = {i: sum(len(t) for t in lab.workload.prompts[i].turns) for i in best}
    return sorted(best, key=lambda i: size[i])[:FIXED_REQUESTS]


def _start_s(lab: Lab, costs: StepCosts, began: float) -> float:
    """A server's start, as the draft-alone timings' two took (their requests' time off)."""
    busy = sum(t.wall_s or t.seconds for t in costs.samples)
    return max(0.0, (lab.clock() - began - busy) / 2)


def _model(lab: Lab, race: Race, entries: Sequence[Contender], cost: float,
           max_k: int) -> Estimates | None:
    """The cost model from the race's own counters and step timings (None: no plain draft was
    measured). v(k) at every measured draft length: its step time in target steps less k*c."""
    drafts = [e for e in entries if _plain(e) and e.blocks and e.drafted]
    mine = [t for t in race.samples if t.label == race.baseline[0]]
    if not drafts or not mine:
        return None
    target = quantile([intervals.step_time(t) for t in mine], LOW_Q)
    base = {(t.block, t.prompt): intervals.step_time(t) for t in mine}
    verify = {}
    for e in drafts:  # each step over the baseline's on the same request's round: few of a
        # candidate's (one block) against many of the baseline's, their low quantiles differ
        theirs = [t for t in race.samples if t.label == e.label]
        ratios = [intervals.step_time(t) / base[t.block, t.prompt] for t in theirs
                  if (t.block, t.prompt) in base]
        step = quantile(ratios, LOW_Q) if ratios else quantile(
            [intervals.step_time(t) for t in theirs], LOW_Q) / target
        verify[e.config[1].k] = round(max(0.5, step - e.config[1].k * cost), 4)
    longest = max(drafts, key=lambda e: e.config[1].k)
    k = longest.config[1].k
    accept = _acceptance(race.samples, longest.label, k)
    total = sum((t.spec for t in race.samples if t.label == longest.label),
                start=type(mine[0].spec)())
    tokens = {t.prompt: max(t.tokens, race.max_tokens) for t in mine}
    return Estimates(alpha=fit_alpha(total.mean_accepted_length or 0.0, k), cost=cost,
                     verify=verify, accept_at=accept,
                     time_share=_shares(lab, {i: n for i, n in tokens.items() if i in accept}))


def _guard(plan: Plan, lab: Lab, race: Race, lead: Contender, slowed: dict[str, Interval],
           entries: list[Contender], cost: float) -> Contender | None:
    """The lead surely slows a category (race.slows): a p-min at its k and a shorter k are
    measured too while the budget lasts; the best measured that slows none and pays wins
    (race.fair; None: none does)."""
    lab.say(f"{lead.label} slows " + ", ".join(f"{c} ({_on(iv).text()})"
                                                for c, iv in slowed.items())
            + ": trying what slows no category")
    seen = {e.label for e in entries}
    k = lead.config[1].k
    extra = []
    for cand in (lead.config[1].but(p_min=P_MIN_TRY),
                 plan.but(k=SHORT_K if k > SHORT_K else max(1, k - 1), p_min=None)):
        if cand.method == "draft" and _label(cand) not in seen:
            extra.append(_entry(cand, cost))
            seen.add(_label(cand))
    if extra and lab.clock() < race.deadline:
        race.run(extra, leader=lead)
        entries += extra
    return race.fair(entries, lead)


def _refused(race: Race, entries: Sequence[Contender]) -> list[Refused]:
    """Each configuration faster than the baseline on the whole but surely slower on some
    category (race.slows): not picked, with the category and its interval there."""
    out = []
    for e in sorted(entries, key=_point, reverse=True):
        if e.interval is None or e.drafted == 0 or e.interval.point <= 1.0:
            continue
        for cat, iv in race.slows(e).items():
            out.append(Refused(label=e.label, category=cat, speedup=_on(iv)))
    return out[:256]


def _on(iv: Interval) -> OnCategory:
    """A category's figure as saved: its interval only from MIN_REQUESTS requests (iv.n: the
    category's pairs)."""
    sure = backed(iv.n)
    return OnCategory(point=round(iv.point, 4), low=round(iv.low, 4) if sure else None,
                      high=round(iv.high, 4) if sure else None, requests=max(iv.n, 1))


def _said(race: Race, e: Contender) -> str:
    """e's figure as printed: '1.31x [1.22-1.40]' from MIN_REQUESTS paired requests of each
    kind it was measured on, else '1.31x (one request: no interval)'."""
    if e.interval is None:
        return "not measured"
    iv = e.interval
    return shown(iv.point, iv.low, iv.high, race.requests(e))


def _row(race: Race, e: Contender, note: str = "") -> Measured:
    plan = e.config[1]
    iv = e.interval or Interval(0.0, 0.0, 0.0)
    n = race.requests(e)
    sure = backed(n)
    mine = [t for t in race.samples if t.label == e.label]
    spec = sum((t.spec for t in mine), start=type(mine[0].spec)()) if mine else None
    tps = sorted(t.tokens / t.seconds for t in mine if t.seconds > 0)
    cats = {c: round(v.point, 4) for c, v in race.categories(e).items()}
    flag = f"dropped: {e.dropped}" if e.dropped else ""
    if race.missing(e):
        flag = (flag + "; " if flag else "") + _unmeasured(race, e)
    elif not sure:  # a bootstrap over one request a category is its point
        flag = (flag + "; " if flag else "") + (f"{no_interval(n).split(':')[0]} of a "
                                                "category: no interval")
    if e.discarded:
        flag = (flag + "; " if flag else "") + (f"{e.discarded} pair(s) above the bound "
                                                "discarded as noise")
    label = e.label + (note or (f" ({e.blocks} block{'s' if e.blocks > 1 else ''})"
                                if e.dropped else ""))
    limit = round(e.bound, 4) if math.isfinite(e.bound) else None
    figs = {name: got[0] or 0.0 for name, got in _figures(race, e).items()}
    return Measured(
        label=label, method=plan.method, k=plan.k, p_min=plan.p_min, chain=chain_of(plan.chain),
        speedup=round(iv.point, 4), low=round(iv.low, 4) if sure else None,
        high=round(iv.high, 4) if sure else None, requests=n,
        tps=round(tps[len(tps) // 2], 3) if tps else 0.0,
        acceptance=spec.acceptance_rate if spec else None, categories=cats, bound=limit,
        latency=figs.get("latency"), ttft=figs.get("ttft"), decode=figs.get("decode"),
        flag=bound_flag(limit, {"speedup": round(iv.point, 4), **({"interval top": round(
            iv.high, 4)} if sure else {}), "decode": figs.get("decode", 0.0), **cats}, flag))


FIGURES: tuple[intervals.Figure, ...] = ("latency", "ttft", "decode")
WHAT = {"latency": "end to end", "decode": "in decode speed",
        "throughput": "in tokens per wall second"}  # what an objective's speedup is of


def _figures(race: Race, e: Contender) -> dict[intervals.Figure, list[float | None]]:
    """e's end-to-end, time-to-first-token and decode figures with their intervals (the
    objective's is e.interval), where measured; no interval from fewer than MIN_REQUESTS
    requests of a kind."""
    out: dict[intervals.Figure, list[float | None]] = {}
    sure = backed(race.requests(e))
    for name in FIGURES:
        got = e.interval if name == race.objective else race.figure(e, name)
        if got is not None:
            out[name] = [round(got.point, 4), round(got.low, 4) if sure else None,
                         round(got.high, 4) if sure else None]
    return out


def _unmeasured(race: Race, e: Contender) -> str:
    return (f"{', '.join(sorted(race.missing(e)))} not measured: the budget had no room for it "
            "(a longer --budget measures it)")


def _measured_on(race: Race, entries: Sequence[Contender]) -> list[str]:
    """The workload's categories some configuration was measured on against the baseline."""
    return [c for c in race.lab.workload.categories if race.weights.get(c, 0.0) > 0
            and any(c in race.categories(e) for e in entries if e.interval is not None)]


def _winners(race: Race, entries: Sequence[Contender]) -> list[Winner]:
    """Each measured category's best measured configuration (the baseline where none is
    faster), for routing requests by their kind; a category nothing was measured on has none
    (it is served as before, no draft: a pick measured on other kinds is no figure for it)."""
    out, kinds = [], race.cats
    for cat in _measured_on(race, entries):
        base = [t.per_token for t in race.samples if t.label == race.baseline[0] and t.tokens
                and kinds.get(t.prompt) == cat]
        base_tps = round(1 / quantile(base, LOW_Q), 3) if base else None
        best: tuple[Contender, Interval] | None = None
        for e in entries:
            if e.interval is None or e.drafted == 0 or e.interval.point > e.bound:
                continue
            got = race.categories(e).get(cat)
            if got is not None and got.point > 1.0 and (best is None
                                                          or got.point > best[1].point):
                best = (e, got)
        if best is None:
            out.append(Winner(category=cat, label="baseline", method="none", k=0, p_min=None,
                              speedup=1.0, baseline_tps=base_tps))
            continue
        e, iv = best
        p, on = e.config[1], _on(iv)
        out.append(Winner(category=cat, label=e.label, method=p.method, k=p.k, p_min=p.p_min,
                          chain=chain_of(p.chain), speedup=on.point, low=on.low, high=on.high,
                          requests=iv.n, baseline_tps=base_tps))
    return out


def _result(plan: Plan, lab: Lab, race: Race, lead: Contender, kept: Contender | None,
            refused: list[Refused], entries: Sequence[Contender], est: Estimates | None,
            curve: list[costmodel.Point], rows: list[Measured], skipped: list[str],
            margin: float, precision: float, budget: float, seq: bool, seconds: float,
            spent: float) -> Result:
    top = kept or lead
    iv = top.interval or Interval(0.0, 0.0, 0.0)
    n = race.requests(top)
    sure = backed(n)
    cats = race.categories(top)
    drift, noise = race.drift(), intervals.noise(race.samples)
    seen = f"{noise.text()}; the baseline drifted {drift:.0%} between blocks"
    if lab.restarts:
        seen += f"; {lab.restarts} restart(s) of servers that remember earlier requests"
    settled = race.stopped in ("precision", "decided") and (kept is None or sure)
    method: Method
    if kept is None:
        method, k, p_min = "none", 0, None
        summary = (f"nothing that slows no category beats the baseline by {margin:.0%}: "
                   "speculation off")
    elif race.stopped == "decided" or iv.point <= 1.0 or top.drafted == 0:
        method, k, p_min = "none", 0, None
        summary = (f"nothing beats the baseline (best {top.label} {_said(race, top)}"
                   + (f"; no interval reaches {1 + margin:.2f}x" if race.stopped == "decided"
                      else "") + "): speculation off")
    else:
        tp = top.config[1]
        method, k, p_min = tp.method, tp.k, tp.p_min
        summary = (f"{top.label} measured {_said(race, top)} {WHAT[race.objective]} over the "
                   "baseline (" + ", ".join(f"{c} {v.point:.2f}x" for c, v in cats.items())
                   + (f"; {_unmeasured(race, top)}" if race.missing(top) else "") + ")")
        if not sure or iv.low <= 1.0 or iv.point <= 1 + margin:
            summary += ("; not surely faster than the baseline (it needs an interval above "
                        f"1.00x and a point over {1 + margin:.2f}x): `up` serves without a "
                        "draft until a tune shows it is")
    summary += _how_sure(race, top, refused, entries, spent, budget, precision, seen, settled)
    if seq:
        summary += f"; one server at a time, the baseline drifted {drift:.0%} between blocks"
    on = method != "none"
    base_times = [t.per_token for t in race.samples if t.label == race.baseline[0]]
    measured_on = _measured_on(race, entries)
    return Result(profile=plan.profile, method=method, k=k, p_min=p_min,
                  chain=chain_of(top.config[1].chain) if on else [],
                  speedup=round(iv.point, 4) if on else 1.0,
                  low=round(iv.low, 4) if on and sure else None,
                  high=round(iv.high, 4) if on and sure else None,
                  requests=n if on else None,
                  unmeasured=[c for c in race.lab.workload.categories
                              if race.weights.get(c, 0.0) > 0 and c not in measured_on],
                  summary=summary[:2000], winners=_winners(race, entries),
                  categories={c: round(v.point, 4) for c, v in cats.items()} if on else {},
                  alpha=est.alpha if est else None, cost=est.cost if est else None,
                  verify={str(k_): round(v, 3) for k_, v in est.verify.items()} if est else {},
                  baseline_tps=round(1 / quantile(base_times, LOW_Q), 3) if base_times else 0.0,
                  predicted=[{"k": p.k, "tokens_per_step": round(p.tokens_per_step, 4),
                              "speedup": round(p.speedup, 4)} for p in curve],
                  measured=rows, skipped=skipped, seconds=round(seconds, 1),
                  created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), settled=settled,
                  stopped=race.stopped or "budget", noise=seen[:1000], sequential=seq,
                  objective=race.objective, figures=_figures(race, top) if on else {},
                  replies=_replies(race, top) if on else [], refused=refused,
                  spans={c: _on(v) for c, v in cats.items()} if on else {})


def _how_sure(race: Race, top: Contender, refused: list[Refused], entries: Sequence[Contender],
              spent: float, budget: float, precision: float, seen: str, settled: bool) -> str:
    """The summary's tail: what was refused, and whether the pick is settled or provisional
    (with what to do to settle it); a precision only where the pick has an interval."""
    out = ""
    if refused:
        sure = all(r.speedup.low is not None for r in refused)  # no "surely" from one request
        out += (f"; refused, as each {'surely slows' if sure else 'was measured slower on'} a "
                "category: ") + _slowing(race, entries, refused)
    n = race.requests(top)
    width = (f"±{top.interval.half_width:.0%}" if top.interval is not None and backed(n)
             else no_interval(n))
    if settled:
        return out + f"; settled: {race.stopped} reached ({width})"
    return out + (f"; provisional: {width} in {spent:.0f} s (budget {budget:.0f} s, precision "
                  f"±{precision:.0%} asked): {seen}; close what runs beside or pass --budget "
                  f"{max(2 * budget / 60, 5):.0f}m to settle it")


def _slowing(race: Race, entries: Sequence[Contender], refused: list[Refused],
             most: int = 4) -> str:
    """The refused configurations in words (`most` of them): each with its figure on the whole
    and the categories it slows, by how much."""
    by: dict[str, list[Refused]] = {}
    for r in refused:
        by.setdefault(r.label, []).append(r)
    words = []
    for label, rs in list(by.items())[:most]:
        whole = next((e for e in entries if e.label == label and e.interval is not None), None)
        words.append(f"{label}{f' {_said(race, whole)}' if whole else ''} slows " + ", ".join(
            f"{r.category} to {r.speedup.text()}" for r in rs))
    more = len(by) - most
    return "; ".join(words) + (f" (and {more} more: --json)" if more > 0 else "")


def _replies(race: Race, e: Contender) -> list[tuple[str, str, int]]:
    """e's greedy replies in the race, each beside the baseline's on the same prompt (the
    first of each), for the sampling check's greedy comparison."""
    base: dict[int, Timed] = {}
    for t in race.samples:
        if t.label == race.baseline[0] and t.text:
            base.setdefault(t.prompt, t)
    mine: dict[int, Timed] = {}
    for t in race.samples:
        if t.label == e.label and t.text and t.prompt in base:
            mine.setdefault(t.prompt, t)
    return [(t.text, base[i].text, base[i].tokens) for i, t in mine.items()][:256]


def schedule(plan: Plan, runner: Sweep, levels: Sequence[int], ks: Sequence[int],
             margin: float = MARGIN) -> tuple[tuple[tuple[int, int, int], ...], list[str]]:
    """k by batch size, for backends that switch k per batch: each k (and the baseline) on one
    server at every level; per level the best k that beats the baseline there by the margin
    (0: none does). Returns inclusive (first, last, k) ranges from 1 (the last level's k carries
    on beyond it, as vLLM does) and a line per level."""
    base = runner.at_levels(plan.baseline(), "baseline", levels)
    runs = {k: runner.at_levels(plan.but(k=k, p_min=None), f"draft k={k}", levels) for k in ks}
    picks, lines = [], []
    for level in levels:
        scores = {k: run_ratio(runs[k][level], base[level]) for k in ks}
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
